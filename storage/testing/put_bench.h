// The loop of a put benchmark (Google Benchmark): each iteration puts a block under a
// fresh key (thread t counts up from 1,000,000 * (t + 1)); the payload, and so its
// checksum, stays the same. `checked` marks the item as hashed by its caller
// (PutItem::checksum_checked).
#pragma once

#include <benchmark/benchmark.h>

#include "storage/testing/blocks.h"
#include "storage/tier.h"

namespace kvtier::storage::testing {

// REQUIRES: put(const PutItem&) returns Status.
template <typename Put>
void PutFreshBlocks(benchmark::State& state, size_t block_bytes, bool checked, Put&& put) {
  uint64_t id = 1'000'000 * (static_cast<uint64_t>(state.thread_index()) + 1);
  TestBlock block = MakeBlock(id, block_bytes);
  for (auto _ : state) {
    block.header.key.lo = ++id;
    if (!put(PutItem{block.header, block.payload, checked}).ok()) state.SkipWithError("put failed");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * block_bytes));
}

}  // namespace kvtier::storage::testing
