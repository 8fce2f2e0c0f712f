// Copy kernels: linear and paged KV updates, block gather and scatter. Each moves whole
// contiguous runs with the widest unit the alignment allows (16 bytes when it can).
#include "gpu/cuda_kernels.cuh"

namespace kvtier::gpu::internal {
namespace {

constexpr unsigned kThreads = 256;
constexpr size_t kChunkBytes = 16 * 1024;  // bytes of a block one thread block copies

unsigned GridFor(size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

template <typename Index>
__global__ void CheckWriteIndices(const Index* indices, uint32_t batch, uint32_t seq, uint32_t max_seq,
                                  DeviceFault* fault) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= batch) return;
  const long long w = static_cast<long long>(indices[i]);
  if (w < 0 || w + seq > max_seq) Report(fault, FaultKind::kBadIndex, i, w);
}

template <typename Unit, typename Index>
__global__ void LinearUpdate(char* cache, const char* update, const Index* indices, uint32_t heads, uint32_t max_seq,
                             uint32_t seq, size_t row_bytes, const DeviceFault* fault) {
  if (Faulted(fault)) return;
  const size_t plane = blockIdx.x;
  const auto w = static_cast<size_t>(indices[plane / heads]);
  auto* dst = reinterpret_cast<Unit*>(cache + (plane * max_seq + w) * row_bytes);
  const auto* src = reinterpret_cast<const Unit*>(update + plane * seq * row_bytes);
  const size_t units = seq * row_bytes / sizeof(Unit);
  for (size_t k = threadIdx.x; k < units; k += blockDim.x) dst[k] = src[k];
}

template <typename Index>
void LaunchLinearTyped(const LinearUpdateArgs& a, size_t row_bytes, bool vector, DeviceFault* fault, cudaStream_t s) {
  const auto* indices = static_cast<const Index*>(a.write_indices);
  CheckWriteIndices<<<GridFor(a.batch), kThreads, 0, s>>>(indices, a.batch, a.seq, a.max_seq, fault);
  const unsigned planes = a.batch * a.heads;
  auto* cache = static_cast<char*>(a.cache);
  const auto* update = static_cast<const char*>(a.update);
  if (vector) {
    LinearUpdate<int4, Index><<<planes, kThreads, 0, s>>>(cache, update, indices, a.heads, a.max_seq, a.seq, row_bytes, fault);
  } else if (row_bytes % 4 == 0) {
    LinearUpdate<uint32_t, Index><<<planes, kThreads, 0, s>>>(cache, update, indices, a.heads, a.max_seq, a.seq, row_bytes, fault);
  } else {
    LinearUpdate<uint16_t, Index><<<planes, kThreads, 0, s>>>(cache, update, indices, a.heads, a.max_seq, a.seq, row_bytes, fault);
  }
}

__global__ void CheckSlots(const int64_t* slots, uint32_t tokens, long long pool_slots, DeviceFault* fault) {
  const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= tokens) return;
  const long long slot = slots[t];
  if (slot < -1 || slot >= pool_slots) Report(fault, FaultKind::kBadIndex, t, slot);
}

// One thread block per token: every KV head's run of head_bytes.
template <typename Unit>
__global__ void PagedUpdate(char* pool, const char* update, const int64_t* slots, uint32_t tokens_per_block,
                            size_t block_bytes, size_t layer_part_offset, size_t head_run_bytes, uint32_t heads,
                            size_t head_bytes, const DeviceFault* fault) {
  if (Faulted(fault)) return;
  const long long slot = slots[blockIdx.x];
  if (slot < 0) return;  // padding
  char* base = pool + static_cast<size_t>(slot / tokens_per_block) * block_bytes + layer_part_offset +
               static_cast<size_t>(slot % tokens_per_block) * head_bytes;
  const char* src = update + static_cast<size_t>(blockIdx.x) * heads * head_bytes;
  const size_t units_per_head = head_bytes / sizeof(Unit);
  for (size_t k = threadIdx.x; k < heads * units_per_head; k += blockDim.x) {
    const size_t h = k / units_per_head;
    const size_t u = k % units_per_head;
    reinterpret_cast<Unit*>(base + h * head_run_bytes)[u] = reinterpret_cast<const Unit*>(src + h * head_bytes)[u];
  }
}

__global__ void CheckBlockIds(const uint32_t* ids, uint32_t count, size_t pool_blocks, uint32_t* bitmap,
                              DeviceFault* fault) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const uint32_t id = ids[i];
  if (id >= pool_blocks) {
    Report(fault, FaultKind::kBadIndex, i, id);
    return;
  }
  if (bitmap != nullptr && (atomicOr(&bitmap[id / 32], 1u << (id % 32)) & (1u << (id % 32))) != 0) {
    Report(fault, FaultKind::kRepeatedBlock, i, id);
  }
}

// Thread block (i, chunk): kChunkBytes of block i, 16 bytes per thread per step.
__global__ void CopyBlocks(char* pool, char* staging, const uint32_t* ids, size_t block_bytes, uint32_t chunks_per_block,
                           bool to_staging, const DeviceFault* fault) {
  if (Faulted(fault)) return;
  const uint32_t i = blockIdx.x / chunks_per_block;
  const size_t begin = static_cast<size_t>(blockIdx.x % chunks_per_block) * kChunkBytes;
  const size_t end = min(begin + kChunkBytes, block_bytes);
  auto* block = reinterpret_cast<int4*>(pool + static_cast<size_t>(ids[i]) * block_bytes);
  auto* staged = reinterpret_cast<int4*>(staging + static_cast<size_t>(i) * block_bytes);
  int4* dst = to_staging ? staged : block;
  const int4* src = to_staging ? block : staged;
  for (size_t k = begin / 16 + threadIdx.x; k < end / 16; k += blockDim.x) dst[k] = src[k];
}

}  // namespace

void LaunchLinearUpdate(const LinearUpdateArgs& a, size_t row_bytes, bool vector, DeviceFault* fault, cudaStream_t s) {
  if (a.index_type == IndexType::kInt32) LaunchLinearTyped<int32_t>(a, row_bytes, vector, fault, s);
  else LaunchLinearTyped<int64_t>(a, row_bytes, vector, fault, s);
}

void LaunchPagedUpdate(const PagedUpdateArgs& a, DeviceFault* fault, cudaStream_t s) {
  const KvLayout& layout = *a.layout;
  const auto pool_slots = static_cast<long long>(a.pool_blocks * layout.tokens_per_block());
  CheckSlots<<<GridFor(a.tokens), kThreads, 0, s>>>(a.slot_mapping, a.tokens, pool_slots, fault);
  const size_t head_bytes = size_t{layout.head_dim()} * layout.bytes_per_element();
  const size_t offset = layout.ByteOffset(a.layer, a.part, 0, 0);
  auto* pool = static_cast<char*>(a.pool);
  const auto* update = static_cast<const char*>(a.update);
  const bool vector = head_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(a.pool) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(a.update) % 16 == 0;
  if (vector) {
    PagedUpdate<int4><<<a.tokens, 128, 0, s>>>(pool, update, a.slot_mapping, layout.tokens_per_block(),
                                              layout.bytes_per_block(), offset, layout.bytes_per_head_run(),
                                              layout.num_kv_heads(), head_bytes, fault);
  } else {
    PagedUpdate<uint16_t><<<a.tokens, 128, 0, s>>>(pool, update, a.slot_mapping, layout.tokens_per_block(),
                                                  layout.bytes_per_block(), offset, layout.bytes_per_head_run(),
                                                  layout.num_kv_heads(), head_bytes, fault);
  }
}

void LaunchCopyBlocks(const BlockCopyArgs& a, bool to_staging, uint32_t* bitmap, DeviceFault* fault, cudaStream_t s) {
  CheckBlockIds<<<GridFor(a.count), kThreads, 0, s>>>(a.block_ids, a.count, a.pool_blocks, bitmap, fault);
  const auto chunks = static_cast<uint32_t>((a.block_bytes + kChunkBytes - 1) / kChunkBytes);
  CopyBlocks<<<a.count * chunks, kThreads, 0, s>>>(static_cast<char*>(a.pool), static_cast<char*>(a.staging),
                                                   a.block_ids, a.block_bytes, chunks, to_staging, fault);
}

}  // namespace kvtier::gpu::internal
