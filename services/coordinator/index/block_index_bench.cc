// Micro-benchmarks of the coordinator's prefix index: lookup, insert (store), evict and
// retention expiry, on an index of 64k blocks in chains of 32 across 4 nodes.
// Run: build/bin/block_index_bench
#include <benchmark/benchmark.h>

#include "services/coordinator/index/block_index.h"

namespace kvtier::coordinator {
namespace {

constexpr uint64_t kChains = 2048;
constexpr uint64_t kChainLength = 32;

std::vector<BlockKey> ChainKeys(uint64_t chain) {
  const OpaqueKeyNamespace ns("bench", "");
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < kChainLength; ++i) keys.push_back(ns.Key(chain * kChainLength + i));
  return keys;
}

std::unique_ptr<BlockIndex> FilledIndex(const Clock* clock = &SystemClock::Instance(),
                                        uint64_t chains = kChains) {
  BlockIndexOptions options;
  options.expected_blocks = chains * kChainLength;
  options.clock = clock;
  std::unique_ptr<BlockIndex> index = *BlockIndex::Create(options);
  for (uint64_t c = 0; c < chains; ++c) {
    const std::vector<BlockKey> keys = ChainKeys(c);
    (void)index->Store({0, std::nullopt, keys, {static_cast<NodeId>(c % 4), Tier::kGpu, 0}, {}});
  }
  return index;
}

// A whole 32-block prompt that is fully cached on one node.
void BM_LookupHit32(benchmark::State& state) {
  std::unique_ptr<BlockIndex> index = FilledIndex();
  std::vector<std::vector<BlockKey>> prompts;
  for (uint64_t c = 0; c < 256; ++c) prompts.push_back(ChainKeys(c * 7 % kChains));
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(index->Lookup(0, prompts[i++ % prompts.size()]));
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kChainLength));
}
BENCHMARK(BM_LookupHit32);

// As BM_LookupHit32 on an index of range(0) chains of 32 blocks (2M: 256 MiB, far past
// the caches), each prompt a random chain: every block a cache miss, as in a coordinator
// holding a cluster's blocks.
void BM_LookupHit32Cold(benchmark::State& state) {
  const uint64_t chains = static_cast<uint64_t>(state.range(0));
  std::unique_ptr<BlockIndex> index = FilledIndex(&SystemClock::Instance(), chains);
  std::vector<std::vector<BlockKey>> prompts;
  for (uint64_t c = 0; c < 4096; ++c) prompts.push_back(ChainKeys(c * 2654435761u % chains));
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(index->Lookup(0, prompts[i++ % prompts.size()]));
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kChainLength));
}
BENCHMARK(BM_LookupHit32Cold)->Arg(kChains)->Arg(1 << 16)->Unit(benchmark::kMicrosecond);

// A prompt whose first block is unknown: one probe and out.
void BM_LookupMiss(benchmark::State& state) {
  std::unique_ptr<BlockIndex> index = FilledIndex();
  const std::vector<BlockKey> unknown = {OpaqueKeyNamespace("other", "").Key(1)};
  for (auto _ : state) benchmark::DoNotOptimize(index->Lookup(0, unknown));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LookupMiss);

// Partial matching: a 31-block prefix cached with tokens (16 per block), then 4 cached
// continuations that share their first 4 tokens; the prompt's tail is 10 tokens of one
// of them. Against BM_LookupHit32: what comparing the tail with the children costs.
void BM_LookupPartial31(benchmark::State& state) {
  constexpr uint32_t kTpb = 16;
  std::unique_ptr<BlockIndex> index =
      *BlockIndex::Create({.expected_blocks = kChains * (kChainLength + 3)});
  auto tokens_of = [](uint64_t block, uint64_t sibling) {
    std::vector<uint32_t> tokens(kTpb);
    for (uint32_t t = 0; t < kTpb; ++t)
      tokens[t] = static_cast<uint32_t>(block * kTpb + t + (t >= 4 ? sibling : 0));
    return tokens;
  };
  const OpaqueKeyNamespace ns("bench-partial", "");
  for (uint64_t c = 0; c < kChains; ++c) {
    std::vector<BlockKey> keys = ChainKeys(c);
    keys.pop_back();
    std::vector<uint32_t> tokens;
    for (uint64_t b = 0; b < keys.size(); ++b) {
      const std::vector<uint32_t> block = tokens_of(c * kChainLength + b, 0);
      tokens.insert(tokens.end(), block.begin(), block.end());
    }
    const Location where{static_cast<NodeId>(c % 4), Tier::kGpu, 0};
    (void)index->Store({0, std::nullopt, keys, where, {}, tokens});
    for (uint64_t sibling = 0; sibling < 4; ++sibling) {
      const BlockKey last = ns.Key(c * 4 + sibling);
      (void)index->Store({0,
                          keys.back(),
                          std::span(&last, 1),
                          where,
                          {},
                          tokens_of(c * kChainLength + 31, sibling)});
    }
  }
  std::vector<std::vector<BlockKey>> prompts;
  std::vector<std::vector<uint32_t>> tails;
  for (uint64_t c = 0; c < 256; ++c) {
    const uint64_t chain = c * 7 % kChains;
    prompts.push_back(ChainKeys(chain));
    prompts.back().pop_back();
    std::vector<uint32_t> tail = tokens_of(chain * kChainLength + 31, 2);
    tail.resize(10);
    tails.push_back(std::move(tail));
  }
  size_t i = 0;
  for (auto _ : state) {
    const size_t p = i++ % prompts.size();
    benchmark::DoNotOptimize(index->Lookup(0, prompts[p], tails[p]));
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kChainLength));
  state.counters["bytes_per_block"] =
      static_cast<double>(index->Stats().memory_bytes) / index->Stats().blocks;
}
BENCHMARK(BM_LookupPartial31);

// Store a new 32-block chain and evict one chain's worth from the same node: the steady
// state of a full worker.
void BM_StoreAndEvict32(benchmark::State& state) {
  std::unique_ptr<BlockIndex> index = FilledIndex();
  uint64_t next_chain = kChains;
  for (auto _ : state) {
    const std::vector<BlockKey> keys = ChainKeys(next_chain++);  // ~100 ns of the iteration
    benchmark::DoNotOptimize(index->Evict(0, Tier::kGpu, kChainLength));
    (void)index->Store({0, std::nullopt, keys, {0, Tier::kGpu, 0}, {}});
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kChainLength) * 2);
}
BENCHMARK(BM_StoreAndEvict32);

// Touch a cached 32-block prefix (the reuse path of a routed request).
void BM_Touch32(benchmark::State& state) {
  std::unique_ptr<BlockIndex> index = FilledIndex();
  std::vector<std::vector<BlockKey>> prompts;
  for (uint64_t c = 0; c < 256; ++c) prompts.push_back(ChainKeys(c * 4 % kChains));
  size_t i = 0;
  for (auto _ : state) index->Touch(0, 0, prompts[i++ % prompts.size()]);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kChainLength));
}
BENCHMARK(BM_Touch32);

// Retention expiry: each iteration stores a 32-block chain with a 1 s retention, then the
// clock passes the deadline of the chain stored 1,000 iterations earlier.
void BM_RetentionExpiry32(benchmark::State& state) {
  FakeClock clock;
  std::unique_ptr<BlockIndex> index = FilledIndex(&clock);
  const std::vector<BlockRetention> retention(kChainLength,
                                              BlockRetention{80, std::chrono::seconds(1)});
  uint64_t c = 0;
  for (auto _ : state) {
    const std::vector<BlockKey> keys = ChainKeys(c++ % kChains);
    (void)index->Store({0,
                        std::nullopt,
                        keys,
                        {static_cast<NodeId>((c - 1) % kChains % 4), Tier::kGpu, 0},
                        retention});
    clock.Advance(std::chrono::milliseconds(1));
    index->AdvanceTime();
  }
  state.counters["expired_blocks"] = static_cast<double>(index->Stats().expirations);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kChainLength));
}
BENCHMARK(BM_RetentionExpiry32);

}  // namespace
}  // namespace kvtier::coordinator
