// Arithmetic kernels: per-token quantization and paged attention (decode, chunked prefill). The
// arithmetic matches the CPU reference (fp32, IEEE division, expf), so results agree to rounding.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "gpu/attention_window.h"
#include "gpu/cuda_kernels.cuh"
#include "gpu/kernel_checks.h"

namespace kvtier::gpu::internal {
namespace {

constexpr unsigned kWarpsPerBlock = 4;
constexpr unsigned kMaxPerLane = kMaxAttentionHeadDim / 32;

__device__ inline float ToFloat(float x) { return x; }
__device__ inline float ToFloat(__half x) { return __half2float(x); }
__device__ inline float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ inline T FromFloat(float x);
template <>
__device__ inline float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ inline __half FromFloat<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ inline __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ inline float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
  return v;
}
__device__ inline float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  return v;
}

// One warp per (token, head) row.
template <typename In, bool kInt8>
__global__ void QuantizeRows(const In* input, void* output, float* scales, size_t rows,
                             uint32_t dim) {
  const size_t row = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const unsigned lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps leave together
  const In* x = input + row * dim;
  float amax = 0.0f;
  for (uint32_t d = lane; d < dim; d += 32) amax = fmaxf(amax, fabsf(ToFloat(x[d])));
  amax = WarpMax(amax);
  const float scale = amax / (kInt8 ? 127.0f : 448.0f);
  if (lane == 0) scales[row] = scale;
  for (uint32_t d = lane; d < dim; d += 32) {
    const float scaled = scale > 0.0f ? ToFloat(x[d]) / scale : 0.0f;
    if constexpr (kInt8) {
      static_cast<int8_t*>(output)[row * dim + d] =
          static_cast<int8_t>(fminf(fmaxf(rintf(scaled), -127.0f), 127.0f));
    } else {
      static_cast<uint8_t*>(output)[row * dim + d] =
          static_cast<uint8_t>(__nv_cvt_float_to_fp8(scaled, __NV_SATFINITE, __NV_E4M3));
    }
  }
}

template <typename Out, bool kInt8>
__global__ void DequantizeElements(const void* input, const float* scales, Out* output,
                                   size_t count, uint32_t dim) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float q;
    if constexpr (kInt8) {
      q = static_cast<float>(static_cast<const int8_t*>(input)[i]);
    } else {
      const __half_raw h =
          __nv_cvt_fp8_to_halfraw(static_cast<const __nv_fp8_storage_t*>(input)[i], __NV_E4M3);
      q = __half2float(__half(h));
    }
    output[i] = FromFloat<Out>(q * scales[i / dim]);
  }
}

template <typename In>
void LaunchQuantizeTyped(const QuantizeArgs& a, cudaStream_t s) {
  const size_t rows = size_t{a.tokens} * a.heads;
  const auto grid = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const auto* input = static_cast<const In*>(a.input);
  if (a.output_dtype == KvDtype::kInt8) {
    QuantizeRows<In, true>
        <<<grid, kWarpsPerBlock * 32, 0, s>>>(input, a.output, a.scales, rows, a.head_dim);
  } else {
    QuantizeRows<In, false>
        <<<grid, kWarpsPerBlock * 32, 0, s>>>(input, a.output, a.scales, rows, a.head_dim);
  }
}

template <typename Out>
void LaunchDequantizeTyped(const DequantizeArgs& a, cudaStream_t s) {
  const size_t count = size_t{a.tokens} * a.heads * a.head_dim;
  const auto grid = static_cast<unsigned>(std::min<size_t>((count + 255) / 256, 65535));
  auto* output = static_cast<Out*>(a.output);
  if (a.input_dtype == KvDtype::kInt8) {
    DequantizeElements<Out, true>
        <<<grid, 256, 0, s>>>(a.input, a.scales, output, count, a.head_dim);
  } else {
    DequantizeElements<Out, false>
        <<<grid, 256, 0, s>>>(a.input, a.scales, output, count, a.head_dim);
  }
}

__global__ void CheckAttentionInputs(const uint32_t* lengths, const uint32_t* tables,
                                     uint32_t batch, uint32_t max_blocks, uint32_t tokens_per_block,
                                     size_t pool_blocks, AttentionWindow window, FaultSlot fault) {
  const uint32_t b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const uint32_t length = lengths[b];
  if (length < 1 || length > max_blocks * tokens_per_block) {
    Report(fault, FaultKind::kBadLength, b, length);
    return;
  }
  for (uint32_t e = 0; e < (length + tokens_per_block - 1) / tokens_per_block; ++e) {
    if (!window.Reads(e, tokens_per_block, length)) continue;
    const uint32_t id = tables[static_cast<size_t>(b) * max_blocks + e];
    if (id >= pool_blocks) {
      Report(fault, FaultKind::kBadTableEntry, b, id, e);
      return;
    }
  }
}

// How a pool's head rows read as floats: element d of a row, before its scale (1 for the
// float dtypes; a quantized row's fp32 scale sits beside the block's values).
template <typename T>
struct FloatRows {
  static constexpr bool kScaled = false;
  __device__ static float At(const char* row, uint32_t d) {
    return ToFloat(reinterpret_cast<const T*>(row)[d]);
  }
};
struct Int8Rows {
  static constexpr bool kScaled = true;
  __device__ static float At(const char* row, uint32_t d) {
    return static_cast<float>(reinterpret_cast<const int8_t*>(row)[d]);
  }
};
struct Int4Rows {  // two per byte, the even element in the low nibble
  static constexpr bool kScaled = true;
  __device__ static float At(const char* row, uint32_t d) {
    const int nibble = (static_cast<uint8_t>(row[d / 2]) >> (4 * (d % 2))) & 0xF;
    return static_cast<float>(nibble >= 8 ? nibble - 16 : nibble);
  }
};
struct Fp8Rows {
  static constexpr bool kScaled = true;
  __device__ static float At(const char* row, uint32_t d) {
    const __half_raw h =
        __nv_cvt_fp8_to_halfraw(reinterpret_cast<const __nv_fp8_storage_t*>(row)[d], __NV_E4M3);
    return __half2float(__half(h));
  }
};

// One key of an online softmax for one query, on a warp: lanes hold q and the accumulator
// split over the head dimension (element lane + 32 k); every lane gets the same score.
// Each element is scaled before it is used, as the CPU reference loads it.
struct OnlineSoftmax {
  float running_max = -INFINITY, running_sum = 0.0f;
  float acc[kMaxPerLane] = {};

  template <typename Rows>
  __device__ void Add(const float* q_reg, const char* key, float key_scale, const char* value,
                      float value_scale, uint32_t dim, float scale, uint32_t lane) {
    float dot = 0.0f;
    for (unsigned k = 0; k < kMaxPerLane; ++k) {
      const uint32_t d = lane + 32 * k;
      if (d < dim) dot += q_reg[k] * Scaled<Rows>(key, d, key_scale);
    }
    const float score = WarpSum(dot) * scale;
    const float new_max = fmaxf(running_max, score);
    const float correction = expf(running_max - new_max);
    const float p = expf(score - new_max);
    running_sum = running_sum * correction + p;
    for (unsigned k = 0; k < kMaxPerLane; ++k) {
      const uint32_t d = lane + 32 * k;
      if (d < dim) acc[k] = acc[k] * correction + p * Scaled<Rows>(value, d, value_scale);
    }
    running_max = new_max;
  }

  template <typename Rows>
  __device__ static float Scaled(const char* row, uint32_t d, float row_scale) {
    if constexpr (Rows::kScaled) return Rows::At(row, d) * row_scale;
    return Rows::At(row, d);
  }
};

// Where one layer's rows and (quantized) scales are in a block, and the call's shape.
struct AttentionGeometry {
  size_t block_bytes, key_offset, value_offset, head_run_bytes, row_bytes;
  size_t key_scale_offset, value_scale_offset, head_scale_bytes;  // quantized layouts
  uint32_t tokens_per_block, dim, group, query_heads, max_blocks;
  float scale;
  AttentionWindow window;

  // Token t's key and value rows of KV head `kv_head` in `block`, with their scales.
  template <typename Rows>
  __device__ void AddToken(OnlineSoftmax& softmax, const float* q_reg, const char* block,
                           uint32_t kv_head, uint32_t t, uint32_t lane) const {
    const uint32_t token = t % tokens_per_block;
    const char* run = block + static_cast<size_t>(kv_head) * head_run_bytes +
                      static_cast<size_t>(token) * row_bytes;
    float key_scale = 1.0f, value_scale = 1.0f;
    if constexpr (Rows::kScaled) {
      const size_t at = static_cast<size_t>(kv_head) * head_scale_bytes + token * sizeof(float);
      key_scale = *reinterpret_cast<const float*>(block + key_scale_offset + at);
      value_scale = *reinterpret_cast<const float*>(block + value_scale_offset + at);
    }
    softmax.Add<Rows>(q_reg, run + key_offset, key_scale, run + value_offset, value_scale, dim,
                      scale, lane);
  }
};

// Thread block (query head, sequence); each warp runs an online softmax over every
// kWarpsPerBlock-th token, lanes split the head dimension; warps merge at the end.
template <typename Rows>
__global__ void DecodeAttentionKernel(const char* pool, AttentionGeometry g, const float* query,
                                      const uint32_t* tables, const uint32_t* lengths,
                                      float* output, FaultSlot fault) {
  if (Faulted(fault)) return;
  __shared__ float warp_max[kWarpsPerBlock], warp_sum[kWarpsPerBlock];
  __shared__ float warp_acc[kWarpsPerBlock][kMaxAttentionHeadDim];
  const uint32_t qh = blockIdx.x, b = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* q = query + (static_cast<size_t>(b) * g.query_heads + qh) * g.dim;
  float q_reg[kMaxPerLane];
  for (unsigned k = 0; k < kMaxPerLane; ++k) {
    const uint32_t d = lane + 32 * k;
    q_reg[k] = d < g.dim ? q[d] : 0.0f;
  }
  OnlineSoftmax softmax;
  const uint32_t* table = tables + static_cast<size_t>(b) * g.max_blocks;
  for (uint32_t t = warp; t < lengths[b]; t += kWarpsPerBlock) {
    if (!g.window.Sees(t, lengths[b])) continue;  // the same for every lane of the warp
    const char* block = pool + static_cast<size_t>(table[t / g.tokens_per_block]) * g.block_bytes;
    g.AddToken<Rows>(softmax, q_reg, block, qh / g.group, t, lane);
  }
  const float running_max = softmax.running_max, running_sum = softmax.running_sum;
  const float* acc = softmax.acc;
  if (lane == 0) {
    warp_max[warp] = running_max;
    warp_sum[warp] = running_sum;
  }
  for (unsigned k = 0; k < kMaxPerLane; ++k) {
    if (lane + 32 * k < g.dim) warp_acc[warp][lane + 32 * k] = acc[k];
  }
  __syncthreads();
  if (warp != 0) return;
  float total_max = -INFINITY;
  for (unsigned w = 0; w < kWarpsPerBlock; ++w) total_max = fmaxf(total_max, warp_max[w]);
  float total_sum = 0.0f;
  for (unsigned w = 0; w < kWarpsPerBlock; ++w)
    total_sum += warp_sum[w] * expf(warp_max[w] - total_max);
  float* out = output + (static_cast<size_t>(b) * g.query_heads + qh) * g.dim;
  for (uint32_t d = lane; d < g.dim; d += 32) {
    float merged = 0.0f;
    for (unsigned w = 0; w < kWarpsPerBlock; ++w)
      merged += warp_acc[w][d] * expf(warp_max[w] - total_max);
    out[d] = merged / total_sum;
  }
}

// One thread per sequence: its chunk's bounds among the query tokens, its context (the
// chunk included, within its table) and the table entries that context reads.
__global__ void CheckChunkInputs(const uint32_t* starts, const uint32_t* lengths,
                                 const uint32_t* tables, uint32_t batch, uint32_t query_tokens,
                                 uint32_t max_blocks, uint32_t tokens_per_block, size_t pool_blocks,
                                 AttentionWindow window, FaultSlot fault) {
  const uint32_t b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  if (b == 0 && starts[0] != 0) {
    Report(fault, FaultKind::kBadQueryStart, 0, starts[0]);
    return;
  }
  const uint32_t start = starts[b], end = starts[b + 1];
  if (end <= start || end > query_tokens || (b + 1 == batch && end != query_tokens)) {
    Report(fault, FaultKind::kBadQueryStart, b + 1, end);
    return;
  }
  const uint32_t chunk = end - start, length = lengths[b];
  if (length < chunk || length > max_blocks * tokens_per_block) {
    Report(fault, FaultKind::kBadLength, b, length, chunk);
    return;
  }
  for (uint32_t e = 0; e < (length + tokens_per_block - 1) / tokens_per_block; ++e) {
    if (!window.Reads(e, tokens_per_block, length - chunk + 1)) continue;
    const uint32_t id = tables[static_cast<size_t>(b) * max_blocks + e];
    if (id >= pool_blocks) {
      Report(fault, FaultKind::kBadTableEntry, b, id, e);
      return;
    }
  }
}

// Thread block (kWarpsPerBlock consecutive query tokens, query head); each warp one query
// token: its sequence by a binary search of the starts, then an online softmax over the
// positions it sees, lanes splitting the head dimension. The warps of a block walk the
// same keys, so all but the first read them from L1.
template <typename Rows>
__global__ void ChunkedAttentionKernel(const char* pool, AttentionGeometry g, const float* query,
                                       const uint32_t* starts, uint32_t batch,
                                       uint32_t query_tokens, const uint32_t* tables,
                                       const uint32_t* lengths, float* output, FaultSlot fault) {
  if (Faulted(fault)) return;
  const uint32_t qh = blockIdx.y, lane = threadIdx.x % 32;
  const uint32_t token = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (token >= query_tokens) return;  // whole warps leave together; no barrier follows
  uint32_t b = 0, hi = batch;         // the last sequence whose chunk starts at or before `token`
  while (hi - b > 1) {
    const uint32_t mid = (b + hi) / 2;
    if (starts[mid] <= token)
      b = mid;
    else
      hi = mid;
  }
  const uint32_t chunk = starts[b + 1] - starts[b];
  const uint32_t visible = lengths[b] - chunk + (token - starts[b]) + 1;
  const float* q = query + (static_cast<size_t>(token) * g.query_heads + qh) * g.dim;
  float q_reg[kMaxPerLane];
  for (unsigned k = 0; k < kMaxPerLane; ++k) {
    const uint32_t d = lane + 32 * k;
    q_reg[k] = d < g.dim ? q[d] : 0.0f;
  }
  OnlineSoftmax softmax;
  const uint32_t* table = tables + static_cast<size_t>(b) * g.max_blocks;
  for (uint32_t t = 0; t < visible; ++t) {
    if (!g.window.Sees(t, visible)) continue;  // the same for every lane of the warp
    const char* block = pool + static_cast<size_t>(table[t / g.tokens_per_block]) * g.block_bytes;
    g.AddToken<Rows>(softmax, q_reg, block, qh / g.group, t, lane);
  }
  float* out = output + (static_cast<size_t>(token) * g.query_heads + qh) * g.dim;
  for (unsigned k = 0; k < kMaxPerLane; ++k) {
    const uint32_t d = lane + 32 * k;
    if (d < g.dim) out[d] = softmax.acc[k] / softmax.running_sum;
  }
}

AttentionGeometry Geometry(const KvLayout& layout, uint32_t layer, uint32_t query_heads,
                           uint32_t max_blocks, float scale, AttentionWindow window) {
  const bool scaled = layout.quantized();
  return {layout.bytes_per_block(),
          layout.ByteOffset(layer, KvPart::kKey, 0, 0),
          layout.ByteOffset(layer, KvPart::kValue, 0, 0),
          layout.bytes_per_head_run(),
          layout.bytes_per_head_row(),
          scaled ? layout.ScaleOffset(layer, KvPart::kKey, 0, 0) : 0,
          scaled ? layout.ScaleOffset(layer, KvPart::kValue, 0, 0) : 0,
          size_t{layout.tokens_per_block()} * sizeof(float),  // a KV head's scales
          layout.tokens_per_block(),
          layout.head_dim(),
          query_heads / layout.num_kv_heads(),
          query_heads,
          max_blocks,
          scale,
          window};
}

// Calls `launch` with the row reader of `dtype` (a value of its type).
template <typename Launch>
void ForRows(KvDtype dtype, Launch&& launch) {
  switch (dtype) {
    case KvDtype::kFp32: launch(FloatRows<float>{}); break;
    case KvDtype::kFp16: launch(FloatRows<__half>{}); break;
    case KvDtype::kBf16: launch(FloatRows<__nv_bfloat16>{}); break;
    case KvDtype::kInt8: launch(Int8Rows{}); break;
    case KvDtype::kInt4: launch(Int4Rows{}); break;
    default: launch(Fp8Rows{}); break;
  }
}

}  // namespace

void LaunchQuantize(const QuantizeArgs& a, cudaStream_t s) {
  switch (a.input_dtype) {
    case KvDtype::kFp32: LaunchQuantizeTyped<float>(a, s); break;
    case KvDtype::kFp16: LaunchQuantizeTyped<__half>(a, s); break;
    default: LaunchQuantizeTyped<__nv_bfloat16>(a, s); break;
  }
}

void LaunchDequantize(const DequantizeArgs& a, cudaStream_t s) {
  switch (a.output_dtype) {
    case KvDtype::kFp32: LaunchDequantizeTyped<float>(a, s); break;
    case KvDtype::kFp16: LaunchDequantizeTyped<__half>(a, s); break;
    default: LaunchDequantizeTyped<__nv_bfloat16>(a, s); break;
  }
}

void LaunchDecodeAttention(const DecodeAttentionArgs& a, FaultSlot fault, cudaStream_t s) {
  const KvLayout& layout = *a.layout;
  const AttentionWindow window{a.window_tokens, a.sink_tokens};
  CheckAttentionInputs<<<(a.batch + 127) / 128, 128, 0, s>>>(
      a.context_lengths, a.block_tables, a.batch, a.max_blocks_per_sequence,
      layout.tokens_per_block(), a.pool_blocks, window, fault);
  const AttentionGeometry g =
      Geometry(layout, a.layer, a.num_query_heads, a.max_blocks_per_sequence, a.scale, window);
  const dim3 grid(a.num_query_heads, a.batch);
  const auto* pool = static_cast<const char*>(a.pool);
  ForRows(layout.dtype(), [&](auto rows) {
    DecodeAttentionKernel<decltype(rows)><<<grid, kWarpsPerBlock * 32, 0, s>>>(
        pool, g, a.query, a.block_tables, a.context_lengths, a.output, fault);
  });
}

void LaunchChunkedAttention(const ChunkedAttentionArgs& a, FaultSlot fault, cudaStream_t s) {
  const KvLayout& layout = *a.layout;
  const AttentionWindow window{a.window_tokens, a.sink_tokens};
  CheckChunkInputs<<<(a.batch + 127) / 128, 128, 0, s>>>(
      a.query_starts, a.context_lengths, a.block_tables, a.batch, a.query_tokens,
      a.max_blocks_per_sequence, layout.tokens_per_block(), a.pool_blocks, window, fault);
  const AttentionGeometry g =
      Geometry(layout, a.layer, a.num_query_heads, a.max_blocks_per_sequence, a.scale, window);
  const dim3 grid((a.query_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock, a.num_query_heads);
  const auto* pool = static_cast<const char*>(a.pool);
  ForRows(layout.dtype(), [&](auto rows) {
    ChunkedAttentionKernel<decltype(rows)><<<grid, kWarpsPerBlock * 32, 0, s>>>(
        pool, g, a.query, a.query_starts, a.batch, a.query_tokens, a.block_tables,
        a.context_lengths, a.output, fault);
  });
}

}  // namespace kvtier::gpu::internal
