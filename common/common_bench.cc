// Micro-benchmarks of common/: the per-block cost of block keys (SHA-256 chains) and of
// moving them into a tenant's key space (KeySalt), and the hot-path cost of metric
// updates. Run: build/bin/common_bench
#include <numeric>
#include <vector>

#include <benchmark/benchmark.h>

#include "common/block_key.h"
#include "common/metrics.h"

namespace kvtier {
namespace {

// Keys for a whole prompt of state.range(1) tokens in blocks of state.range(0) tokens.
void BM_ComputeBlockKeys(benchmark::State& state) {
  const auto per_block = static_cast<uint32_t>(state.range(0));
  std::vector<uint32_t> tokens(static_cast<size_t>(state.range(1)));
  std::iota(tokens.begin(), tokens.end(), 1000);
  const BlockExtraKeys extra{0, "llama3-8b/bf16", {}};
  for (auto _ : state) {
    benchmark::DoNotOptimize(ComputeBlockKeys("tenant-a", tokens, per_block, extra));
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(tokens.size() / per_block));
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(tokens.size() * sizeof(uint32_t)));
}
BENCHMARK(BM_ComputeBlockKeys)->Args({16, 8192})->Args({512, 8192})->Args({512, 131072});

void BM_OpaqueKey(benchmark::State& state) {
  const OpaqueKeyNamespace ns("mooncake", "tenant-a");
  uint64_t id = 0;
  for (auto _ : state) benchmark::DoNotOptimize(ns.Key(id++));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_OpaqueKey);

// A server moving a request's state.range(0) keys into a tenant's key space (KeySalt):
// what every tenant's lookup, allocate and commit pays before it reaches an index.
void BM_SaltKeys(benchmark::State& state) {
  const KeySalt salt("tenant-a");
  std::vector<uint32_t> tokens(static_cast<size_t>(state.range(0)) * 16);
  std::iota(tokens.begin(), tokens.end(), 1000);
  const std::vector<BlockKey> keys = ComputeBlockKeys("", tokens, 16);
  for (auto _ : state) benchmark::DoNotOptimize(salt.Apply(keys));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_SaltKeys)->Arg(1)->Arg(64)->Arg(512);

void BM_CounterInc(benchmark::State& state) {
  static MetricsRegistry registry;
  static Counter& counter = (*registry.AddCounter("kvtier_bench_total", "Bench."))->WithLabels({});
  for (auto _ : state) counter.Inc();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CounterInc)->Threads(1)->Threads(2);

void BM_HistogramObserve(benchmark::State& state) {
  static MetricsRegistry registry;
  static Histogram& histogram =
      (*registry.AddHistogram("kvtier_bench_seconds", "Bench.", ExponentialBuckets(5e-6, 2, 20)))
          ->WithLabels({});
  double value = 1e-6;
  for (auto _ : state) {
    histogram.Observe(value);
    value = value < 1.0 ? value * 1.7 : 1e-6;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HistogramObserve)->Threads(1)->Threads(2);

// A registry of the size a busy node exposes: 20 families x 10 children, 4 histograms.
void BM_Exposition(benchmark::State& state) {
  MetricsRegistry registry;
  for (int f = 0; f < 16; ++f) {
    CounterFamily* family =
        *registry.AddCounter("kvtier_family_" + std::to_string(f) + "_total", "Help.", {"node"});
    for (int c = 0; c < 10; ++c) family->WithLabels({"node-" + std::to_string(c)}).Inc(c);
  }
  for (int h = 0; h < 4; ++h) {
    HistogramFamily* family =
        *registry.AddHistogram("kvtier_latency_" + std::to_string(h) + "_seconds", "Help.",
                               ExponentialBuckets(5e-6, 2, 20), {"method"});
    for (int c = 0; c < 10; ++c) family->WithLabels({"m" + std::to_string(c)}).Observe(1e-4);
  }
  size_t bytes = 0;
  for (auto _ : state) {
    const std::string text = registry.Exposition();
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_Exposition);

}  // namespace
}  // namespace kvtier
