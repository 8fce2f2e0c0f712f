// The paged update into a quantized pool (int8, int4, fp8 e4m3): each token's head row is
// scaled by its largest magnitude and rounded as the CPU reference does (common/kv_layout.h),
// its fp32 scale written beside the block's values.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "gpu/cuda_kernels.cuh"

namespace kvtier::gpu::internal {
namespace {

constexpr unsigned kRowsPerBlock = 4;  // a warp a row

__device__ inline float InputFloat(float x) { return x; }
__device__ inline float InputFloat(__half x) { return __half2float(x); }
__device__ inline float InputFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

__device__ inline float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
  return v;
}

// round(x / scale) within [-range, range], 0 where the row is all zeros.
__device__ inline float Level(float x, float scale, float range) {
  return scale > 0.0f ? fminf(fmaxf(rintf(x / scale), -range), range) : 0.0f;
}

struct QuantizedTarget {
  size_t block_bytes, layer_part_offset, head_run_bytes, row_bytes, scale_offset;
  uint32_t tokens_per_block, heads, dim;
  KvDtype dtype;
};

// One warp per (token, head) row of the update.
template <typename In>
__global__ void QuantizedPagedUpdate(char* pool, const In* update, const int64_t* slots,
                                     uint32_t tokens, QuantizedTarget g, FaultSlot fault) {
  if (Faulted(fault)) return;
  const size_t row = static_cast<size_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const unsigned lane = threadIdx.x % 32;
  if (row >= static_cast<size_t>(tokens) * g.heads) return;  // whole warps leave together
  const long long slot = slots[row / g.heads];
  if (slot < 0) return;  // padding
  const auto head = static_cast<uint32_t>(row % g.heads);
  const auto token = static_cast<uint32_t>(slot % g.tokens_per_block);
  char* block = pool + static_cast<size_t>(slot / g.tokens_per_block) * g.block_bytes;
  const In* x = update + row * g.dim;
  float amax = 0.0f;
  for (uint32_t d = lane; d < g.dim; d += 32) amax = fmaxf(amax, fabsf(InputFloat(x[d])));
  amax = WarpMax(amax);
  const float range = g.dtype == KvDtype::kInt8   ? 127.0f
                      : g.dtype == KvDtype::kInt4 ? 7.0f
                                                  : 448.0f;
  const float scale = amax / range;
  auto* out = reinterpret_cast<uint8_t*>(block + g.layer_part_offset + head * g.head_run_bytes +
                                         token * g.row_bytes);
  if (g.dtype == KvDtype::kInt4) {  // a lane a byte: the even element in the low nibble
    for (uint32_t j = lane; j < g.dim / 2; j += 32) {
      const int low = static_cast<int>(Level(InputFloat(x[2 * j]), scale, range));
      const int high = static_cast<int>(Level(InputFloat(x[2 * j + 1]), scale, range));
      out[j] = static_cast<uint8_t>((low & 0xF) | ((high & 0xF) << 4));
    }
  } else if (g.dtype == KvDtype::kInt8) {
    for (uint32_t d = lane; d < g.dim; d += 32)
      out[d] = static_cast<uint8_t>(static_cast<int8_t>(Level(InputFloat(x[d]), scale, range)));
  } else {
    for (uint32_t d = lane; d < g.dim; d += 32) {
      const float scaled = scale > 0.0f ? InputFloat(x[d]) / scale : 0.0f;
      out[d] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(scaled, __NV_SATFINITE, __NV_E4M3));
    }
  }
  if (lane == 0) {
    *reinterpret_cast<float*>(block + g.scale_offset +
                              (static_cast<size_t>(head) * g.tokens_per_block + token) *
                                  sizeof(float)) = scale;
  }
}

}  // namespace

void LaunchQuantizedPagedUpdate(const PagedUpdateArgs& a, FaultSlot fault, cudaStream_t s) {
  const KvLayout& layout = *a.layout;
  const auto pool_slots = static_cast<long long>(a.pool_blocks * layout.tokens_per_block());
  LaunchCheckSlots(a.slot_mapping, a.tokens, pool_slots, fault, s);
  const QuantizedTarget g{layout.bytes_per_block(),
                          layout.ByteOffset(a.layer, a.part, 0, 0),
                          layout.bytes_per_head_run(),
                          layout.bytes_per_head_row(),
                          layout.ScaleOffset(a.layer, a.part, 0, 0),
                          layout.tokens_per_block(),
                          layout.num_kv_heads(),
                          layout.head_dim(),
                          layout.dtype()};
  const size_t rows = size_t{a.tokens} * layout.num_kv_heads();
  const auto grid = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  auto* pool = static_cast<char*>(a.pool);
  switch (a.update_dtype) {
    case KvDtype::kFp32:
      QuantizedPagedUpdate<float><<<grid, kRowsPerBlock * 32, 0, s>>>(
          pool, static_cast<const float*>(a.update), a.slot_mapping, a.tokens, g, fault);
      break;
    case KvDtype::kFp16:
      QuantizedPagedUpdate<__half><<<grid, kRowsPerBlock * 32, 0, s>>>(
          pool, static_cast<const __half*>(a.update), a.slot_mapping, a.tokens, g, fault);
      break;
    default:
      QuantizedPagedUpdate<__nv_bfloat16><<<grid, kRowsPerBlock * 32, 0, s>>>(
          pool, static_cast<const __nv_bfloat16*>(a.update), a.slot_mapping, a.tokens, g, fault);
      break;
  }
}

}  // namespace kvtier::gpu::internal
