// A quantized pool's attention against the same attention over an fp16 pool: the same
// keys and values (uniform in [-1, 1]) written with UpdatePaged (fp32 updates) into a pool
// of each dtype, and chunked prefill attention (one sequence, `context` tokens, a chunk of
// `chunk`) read back from both. What quantized_pool_test.cc bounds and attention_bench
// reports (the error of int8, int4 and fp8 pools, and their bytes per block).
//
// Thread safety: none (one backend). REQUIRES: the backend reads and writes `dtype` pools.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include <random>

#include "gpu/kernels.h"
#include "gpu/numeric.h"

namespace kvtier::gpu::testing {

// `host` in a new buffer of the backend (no gtest: the benchmarks use it too).
template <typename T>
Result<DeviceBuffer> ToBackend(KernelBackend& backend, const std::vector<T>& host) {
  KVTIER_ASSIGN_OR_RETURN(
      DeviceBuffer buffer,
      DeviceBuffer::Create(backend, MemoryKind::kDevice, std::max<size_t>(1, host.size() * sizeof(T))));
  if (!host.empty()) KVTIER_RETURN_IF_ERROR(backend.Copy(buffer.data(), host.data(), host.size() * sizeof(T)));
  return buffer;
}

inline std::vector<float> Uniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(n);
  for (auto& v : values) v = dist(rng);
  return values;
}

struct AttentionError {
  float max_abs = 0;  // the largest |quantized - fp16| of any output element
  float rms = 0;      // over every output element
  Status status;      // the first refused call, if one was
};

struct QuantizedAttentionShape {
  uint32_t kv_heads = 2, query_heads = 4, head_dim = 64, tokens_per_block = 16;
  uint32_t context = 256, chunk = 32;
};

inline KvLayout AttentionLayout(const QuantizedAttentionShape& s, KvDtype dtype) {
  return KvLayout::Create({.num_layers = 1,
                           .num_kv_heads = s.kv_heads,
                           .head_dim = s.head_dim,
                           .tokens_per_block = s.tokens_per_block,
                           .dtype = dtype})
      .value();
}

// The chunk's attention output over a pool of `dtype` holding keys and values (seeded).
inline Result<std::vector<float>> ChunkOverPool(KernelBackend& backend, KvDtype dtype,
                                                const QuantizedAttentionShape& s,
                                                const std::vector<float>& query) {
  const KvLayout layout = AttentionLayout(s, dtype);
  const uint32_t blocks = (s.context + s.tokens_per_block - 1) / s.tokens_per_block;
  KVTIER_ASSIGN_OR_RETURN(DeviceBuffer pool,
                          ToBackend(backend, std::vector<uint8_t>(blocks * layout.bytes_per_block())));
  std::vector<int64_t> slots(s.context);
  for (uint32_t t = 0; t < s.context; ++t) slots[t] = t;
  KVTIER_ASSIGN_OR_RETURN(DeviceBuffer slot_buf, ToBackend(backend, slots));
  for (const KvPart part : {KvPart::kKey, KvPart::kValue}) {
    const std::vector<float> rows = Uniform(size_t{s.context} * s.kv_heads * s.head_dim,
                                            part == KvPart::kKey ? 11 : 12, -1.0f, 1.0f);
    DeviceBuffer update_buf;
    if (dtype == KvDtype::kFp16) {  // a float pool takes its own dtype
      std::vector<uint16_t> half(rows.size());
      for (size_t i = 0; i < rows.size(); ++i) half[i] = FloatToHalf(rows[i]);
      KVTIER_ASSIGN_OR_RETURN(update_buf, ToBackend(backend, half));
    } else {
      KVTIER_ASSIGN_OR_RETURN(update_buf, ToBackend(backend, rows));
    }
    PagedUpdateArgs args{pool.data(), blocks, &layout, 0, part, update_buf.data(),
                         slot_buf.as<int64_t>(), s.context};
    args.update_dtype = KvDtype::kFp32;
    KVTIER_RETURN_IF_ERROR(backend.UpdatePaged(args));
  }
  std::vector<uint32_t> table(blocks), starts = {0, s.chunk}, contexts = {s.context};
  for (uint32_t b = 0; b < blocks; ++b) table[b] = b;
  KVTIER_ASSIGN_OR_RETURN(DeviceBuffer q, ToBackend(backend, query));
  KVTIER_ASSIGN_OR_RETURN(DeviceBuffer st, ToBackend(backend, starts));
  KVTIER_ASSIGN_OR_RETURN(DeviceBuffer tb, ToBackend(backend, table));
  KVTIER_ASSIGN_OR_RETURN(DeviceBuffer cx, ToBackend(backend, contexts));
  KVTIER_ASSIGN_OR_RETURN(DeviceBuffer out, ToBackend(backend, std::vector<float>(query.size())));
  KVTIER_RETURN_IF_ERROR(backend.ChunkedAttention(
      {.pool = pool.data(),
       .pool_blocks = blocks,
       .layout = &layout,
       .layer = 0,
       .batch = 1,
       .num_query_heads = s.query_heads,
       .query_tokens = s.chunk,
       .query = q.as<float>(),
       .query_starts = st.as<uint32_t>(),
       .block_tables = tb.as<uint32_t>(),
       .max_blocks_per_sequence = blocks,
       .context_lengths = cx.as<uint32_t>(),
       .scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim)),
       .output = out.as<float>()}));
  std::vector<float> host(query.size());
  KVTIER_RETURN_IF_ERROR(backend.Copy(host.data(), out.data(), host.size() * sizeof(float)));
  return host;
}

inline AttentionError QuantizedAgainstFp16(KernelBackend& backend, KvDtype dtype,
                                           const QuantizedAttentionShape& s = {}) {
  // Queries in [-4, 4]: attention that is not near uniform, so errors in keys show.
  const std::vector<float> query =
      Uniform(size_t{s.chunk} * s.query_heads * s.head_dim, 13, -4.0f, 4.0f);
  AttentionError e;
  Result<std::vector<float>> fp16 = ChunkOverPool(backend, KvDtype::kFp16, s, query);
  Result<std::vector<float>> quantized = ChunkOverPool(backend, dtype, s, query);
  if (!fp16.ok() || !quantized.ok()) {
    e.status = !fp16.ok() ? fp16.status() : quantized.status();
    return e;
  }
  double squares = 0;
  for (size_t i = 0; i < query.size(); ++i) {
    const float d = std::fabs((*quantized)[i] - (*fp16)[i]);
    e.max_abs = std::max(e.max_abs, d);
    squares += double{d} * d;
  }
  e.rms = static_cast<float>(std::sqrt(squares / static_cast<double>(query.size())));
  return e;
}

}  // namespace kvtier::gpu::testing
