// TierIndex on its own: finds of stored blocks, and the churn of a full tier (a new
// block in, the victim out), at a host tier's and a disk tier's number of blocks: of
// blocks that are each a chain of their own, and of chains of 16 blocks stored leaf first
// (as a tier above demotes them) and read back later.
//
//   build/bin/tier_index_bench
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "storage/tier_index.h"

namespace kvtier::storage {
namespace {

// A node's format tag: a layout fingerprint and the engine's tag, as TierLink writes them.
constexpr const char* kFormat = "L32/H8/D128/T16/fp16/W0/S0-5f3a9c21|f0000000000000009";

std::vector<BlockHeader> RandomHeaders(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<BlockHeader> headers(n);
  for (BlockHeader& header : headers) {
    header.key = BlockKey{rng() >> 1, rng()};  // a chained hash's bits
    header.format_tag = kFormat;
    header.payload_bytes = 256 << 10;
    header.priority = 50;
    header.first_in_chain = true;
  }
  return headers;
}

// Chains of kChainBlocks blocks, root first within each chain.
constexpr size_t kChainBlocks = 16;
std::vector<BlockHeader> RandomChains(size_t n, uint64_t seed) {
  std::vector<BlockHeader> headers = RandomHeaders(n, seed);
  for (size_t i = 0; i < n; ++i) {
    if (i % kChainBlocks == 0) continue;
    headers[i].parent = headers[i - 1].key;
    headers[i].first_in_chain = false;
  }
  return headers;
}

void BM_TierIndexFind(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  TierIndex index(&SystemClock::Instance());
  const std::vector<BlockHeader> headers = RandomHeaders(n, 1);
  for (size_t i = 0; i < n; ++i) index.Insert(headers[i], 1, i);
  std::mt19937_64 rng(2);
  for (auto _ : state) {
    const BlockHeader& wanted = headers[rng() % n];
    benchmark::DoNotOptimize(index.Find(wanted.key, kFormat));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TierIndexFind)->ArgName("blocks")->Arg(32768)->Arg(262144);

void BM_TierIndexChurn(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  TierIndex index(&SystemClock::Instance());
  const std::vector<BlockHeader> headers = RandomHeaders(2 * n, 3);
  for (size_t i = 0; i < n; ++i) index.Insert(headers[i], 1, i);
  // The index holds a window of n of the 2n headers, oldest first: each step evicts the
  // oldest and stores the next one round the ring, which the window does not hold.
  size_t next = n;
  for (auto _ : state) {
    index.Erase(index.Victim());
    index.Insert(headers[next], 1, next);
    next = next + 1 == headers.size() ? 0 : next + 1;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TierIndexChurn)->ArgName("blocks")->Arg(32768)->Arg(262144);

// As BM_TierIndexChurn, with chains: each chain comes leaf first (as a tier above
// demotes it) and is read once, root to leaf, half a window later; the victims are
// whatever eviction picks. An item is one block in and one out.
void BM_TierIndexChainChurn(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  TierIndex index(&SystemClock::Instance());
  const std::vector<BlockHeader> headers = RandomChains(2 * n, 5);
  const auto store_chain = [&](size_t first) {
    for (size_t k = kChainBlocks; k-- > 0;) index.Insert(headers[first + k], 1, first + k);
  };
  for (size_t c = 0; c < n; c += kChainBlocks) store_chain(c);
  size_t next = n;
  for (auto _ : state) {
    for (size_t k = 0; k < kChainBlocks; ++k) index.Erase(index.Victim());
    store_chain(next);
    const size_t read = (next + n + n / 2) % headers.size();  // a chain stored half a window ago
    for (size_t k = 0; k < kChainBlocks; ++k) {
      const uint32_t id = index.Find(headers[read + k].key, kFormat);
      if (id != TierIndex::kNil) index.Touch(id);
    }
    next = next + kChainBlocks == headers.size() ? 0 : next + kChainBlocks;
  }
  state.SetItemsProcessed(state.iterations() * kChainBlocks);
}
BENCHMARK(BM_TierIndexChainChurn)->ArgName("blocks")->Arg(32768)->Arg(262144);

}  // namespace
}  // namespace kvtier::storage

BENCHMARK_MAIN();
