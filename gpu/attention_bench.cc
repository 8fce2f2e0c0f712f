// Chunked prefill attention through the paged cache against the same attention over a
// dense cache: one block holding the whole context, so that the kernel reads keys and
// values with no block table indirection. Each on every backend this machine has (the CPU
// reference; CUDA when a device answers): fp16 KV, 8 query heads over 2 KV heads, a chunk
// after a cached prefix. items_per_second counts the chunk's query tokens.
//
// BM_QuantizedPoolError: the error of quantized pools' attention against an fp16 pool's.
//
//   build/bin/attention_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <vector>

#include "gpu/kernels.h"
#include "gpu/testing/quantized_attention.h"

namespace kvtier::gpu {
namespace {

constexpr uint32_t kQueryHeads = 8, kKvHeads = 2;

struct Setup {
  std::unique_ptr<KernelBackend> backend;
  KvLayout layout;
  DeviceBuffer pool, query, starts, table, context, output;
  uint32_t blocks = 0;
};

template <typename T>
DeviceBuffer Upload(KernelBackend& backend, const std::vector<T>& host) {
  DeviceBuffer buffer =
      DeviceBuffer::Create(backend, MemoryKind::kDevice, host.size() * sizeof(T)).value();
  if (!backend.Copy(buffer.data(), host.data(), host.size() * sizeof(T)).ok()) std::abort();
  return buffer;
}

// A pool of fp16 blocks of `block_tokens` holding one sequence of `context` tokens, its
// blocks in reverse order (paged) or one block (block_tokens == context: dense).
std::unique_ptr<Setup> MakeSetup(std::unique_ptr<KernelBackend> backend, uint32_t context,
                                 uint32_t chunk, uint32_t head_dim, uint32_t block_tokens) {
  auto s = std::make_unique<Setup>(Setup{std::move(backend),
                                         KvLayout::Create({.num_layers = 1,
                                                           .num_kv_heads = kKvHeads,
                                                           .head_dim = head_dim,
                                                           .tokens_per_block = block_tokens,
                                                           .dtype = KvDtype::kFp16})
                                             .value(),
                                         {},
                                         {},
                                         {},
                                         {},
                                         {},
                                         {},
                                         0});
  s->blocks = (context + block_tokens - 1) / block_tokens;
  const size_t pool_bytes = size_t{s->blocks} * s->layout.bytes_per_block();
  std::vector<uint16_t> kv(pool_bytes / 2);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<uint16_t>(0x3000 + i % 0x0800);
  s->pool = Upload(*s->backend, kv);
  std::vector<uint32_t> table(s->blocks);
  for (uint32_t e = 0; e < s->blocks; ++e) table[e] = s->blocks - 1 - e;
  s->table = Upload(*s->backend, table);
  std::vector<float> query(size_t{chunk} * kQueryHeads * head_dim);
  for (size_t i = 0; i < query.size(); ++i) query[i] = static_cast<float>(i % 17) / 17.0f - 0.5f;
  s->query = Upload(*s->backend, query);
  s->output = Upload(*s->backend, std::vector<float>(query.size()));
  s->starts = Upload(*s->backend, std::vector<uint32_t>{0, chunk});
  s->context = Upload(*s->backend, std::vector<uint32_t>{context});
  return s;
}

// Args: context tokens, chunk tokens, head_dim, block tokens (0: dense, one block).
void Run(benchmark::State& state, bool cuda) {
  const auto context = static_cast<uint32_t>(state.range(0));
  const auto chunk = static_cast<uint32_t>(state.range(1));
  const auto head_dim = static_cast<uint32_t>(state.range(2));
  const auto block_tokens = state.range(3) == 0 ? context : static_cast<uint32_t>(state.range(3));
  std::unique_ptr<KernelBackend> backend;
  if (cuda) {
    auto made = MakeCudaBackend(0);
    if (!made.ok()) {
      state.SkipWithError(made.status().ToString().c_str());
      return;
    }
    backend = std::move(made).value();
  } else {
    backend = MakeCpuBackend();
  }
  const std::unique_ptr<Setup> s =
      MakeSetup(std::move(backend), context, chunk, head_dim, block_tokens);
  const ChunkedAttentionArgs args{.pool = s->pool.data(),
                                  .pool_blocks = s->blocks,
                                  .layout = &s->layout,
                                  .layer = 0,
                                  .batch = 1,
                                  .num_query_heads = kQueryHeads,
                                  .query_tokens = chunk,
                                  .query = s->query.as<float>(),
                                  .query_starts = s->starts.as<uint32_t>(),
                                  .block_tables = s->table.as<uint32_t>(),
                                  .max_blocks_per_sequence = s->blocks,
                                  .context_lengths = s->context.as<uint32_t>(),
                                  .scale = 1.0f / std::sqrt(static_cast<float>(head_dim)),
                                  .output = s->output.as<float>()};
  for (auto _ : state) {
    if (Status st = s->backend->ChunkedAttention(args); !st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
  }
  // Each query token i sees context - chunk + i + 1 keys: two dot products of head_dim each.
  const auto c = static_cast<double>(chunk);
  const double keys = c * (context - chunk) + c * (c + 1) / 2;
  state.counters["GFLOPs"] = benchmark::Counter(
      4.0 * keys * kQueryHeads * head_dim * 1e-9 * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * chunk);
}

void BM_ChunkedAttentionCpu(benchmark::State& state) { Run(state, false); }
void BM_ChunkedAttentionCuda(benchmark::State& state) { Run(state, true); }

// CPU: a 128-token chunk after 384 cached tokens, head_dim 64; paged (16-token blocks)
// and dense.
BENCHMARK(BM_ChunkedAttentionCpu)
    ->Args({512, 128, 64, 16})
    ->Args({512, 128, 64, 0})
    ->Unit(benchmark::kMillisecond);
// CUDA: a 512-token chunk after 1,536 cached tokens and a whole 2,048-token prompt,
// head_dim 128, 16-token blocks and dense.
BENCHMARK(BM_ChunkedAttentionCuda)
    ->Args({2048, 512, 128, 16})
    ->Args({2048, 512, 128, 0})
    ->Args({2048, 2048, 128, 16})
    ->Args({2048, 2048, 128, 0})
    ->Unit(benchmark::kMicrosecond);

// A quantized pool's chunked attention (a 32-token chunk after 224 cached tokens, head_dim
// 64) against the same over an fp16 pool, on the CPU reference: the error of the output and
// the bytes a block takes. Arg: the pool's dtype.
void BM_QuantizedPoolError(benchmark::State& state) {
  const auto dtype = static_cast<KvDtype>(state.range(0));
  auto cpu = MakeCpuBackend();
  testing::AttentionError e;
  for (auto _ : state) e = testing::QuantizedAgainstFp16(*cpu, dtype);
  if (!e.status.ok()) {
    state.SkipWithError(e.status.ToString().c_str());
    return;
  }
  const testing::QuantizedAttentionShape shape;
  state.SetLabel(std::string(DtypeName(dtype)));
  state.counters["max_abs_error"] = e.max_abs;
  state.counters["rms_error"] = e.rms;
  state.counters["block_bytes"] =
      static_cast<double>(testing::AttentionLayout(shape, dtype).bytes_per_block());
  state.counters["of_fp16_bytes"] =
      static_cast<double>(testing::AttentionLayout(shape, dtype).bytes_per_block()) /
      static_cast<double>(testing::AttentionLayout(shape, KvDtype::kFp16).bytes_per_block());
}
BENCHMARK(BM_QuantizedPoolError)
    ->Arg(static_cast<int>(KvDtype::kInt8))
    ->Arg(static_cast<int>(KvDtype::kInt4))
    ->Arg(static_cast<int>(KvDtype::kFp8E4m3))
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvtier::gpu
