// Micro-benchmarks of the worker's BlockPool: blank allocation plus free (the vLLM
// benchmark_block_pool.py shape), and a sequence's life with prefix reuse.
#include <benchmark/benchmark.h>

#include <numeric>

#include "services/worker/pool/block_pool.h"

namespace kvtier::worker {
namespace {

void BM_AllocateFree(benchmark::State& state) {
  auto pool = BlockPool::Create({.num_blocks = 100000, .tokens_per_block = 16}).value();
  const auto count = static_cast<uint32_t>(state.range(0));
  std::vector<BlockId> blocks;
  std::vector<EvictedBlock> evicted;
  for (auto _ : state) {
    blocks.clear();
    if (!pool->AllocateBlocks(count, &blocks, &evicted).ok() || !pool->FreeBlocks(blocks).ok())
      state.SkipWithError("pool");
  }
  state.SetItemsProcessed(state.iterations() * count);  // blocks allocated and freed
}
BENCHMARK(BM_AllocateFree)->Arg(10)->Arg(100)->Arg(1000);

// 64-block prompts sharing a 48-block prefix: start (48 reused, 16 new), commit, free.
void BM_SequenceWithPrefixReuse(benchmark::State& state) {
  constexpr uint32_t kTpb = 16, kBlocks = 64, kShared = 48;
  auto pool =
      BlockPool::Create({.num_blocks = 100000, .tokens_per_block = kTpb, .partial_reuse = false})
          .value();
  std::vector<uint32_t> tokens(kBlocks * kTpb);
  std::iota(tokens.begin(), tokens.end(), 0);
  std::vector<BlockKey> keys(kBlocks);
  for (uint32_t i = 0; i < kBlocks; ++i) keys[i] = BlockKey{i + 1, 77};
  SequenceId id = 0;
  for (auto _ : state) {
    for (uint32_t i = kShared; i < kBlocks; ++i) keys[i].lo = id;  // a new suffix each time
    auto start = pool->StartSequence({id, BlockKey{0, 1}, 0, 0, keys, tokens});
    if (!start.ok() || !pool->Commit(id, keys, tokens, {}).ok() || !pool->FreeSequence(id).ok())
      state.SkipWithError("pool");
    pool->TakeEvents();
    ++id;
  }
  state.SetItemsProcessed(state.iterations() * kBlocks);
}
BENCHMARK(BM_SequenceWithPrefixReuse);

}  // namespace
}  // namespace kvtier::worker
