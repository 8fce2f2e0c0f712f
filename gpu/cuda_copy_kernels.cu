// Copy kernels: linear and paged KV updates, block gather and scatter. Each moves whole
// contiguous runs with the widest unit the alignment allows (16 bytes when it can).
#include "gpu/cuda_kernels.cuh"

namespace kvtier::gpu::internal {
namespace {

constexpr unsigned kThreads = 256;

unsigned GridFor(size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// Copies units [begin, end) of src to dst with the thread block. A full chunk is copied
// with all of a thread's loads issued before its first store (kUnroll independent loads
// in flight per thread: the copy is bound by memory latency otherwise); a short tail
// falls back to a plain strided loop.
constexpr unsigned kUnroll = 4;
static_assert(kThreads * kUnroll == kUnitsPerChunk);
template <typename Unit>
__device__ inline void CopyChunk(Unit* __restrict__ dst, const Unit* __restrict__ src, size_t begin,
                                 size_t end) {
  if (end - begin == size_t{kThreads} * kUnroll) {
    Unit staged[kUnroll];
#pragma unroll
    for (unsigned u = 0; u < kUnroll; ++u) staged[u] = src[begin + u * kThreads + threadIdx.x];
#pragma unroll
    for (unsigned u = 0; u < kUnroll; ++u) dst[begin + u * kThreads + threadIdx.x] = staged[u];
    return;
  }
  for (size_t k = begin + threadIdx.x; k < end; k += kThreads) dst[k] = src[k];
}

template <typename Index>
__global__ void CheckWriteIndices(const Index* indices, uint32_t batch, uint32_t seq,
                                  uint32_t max_seq, FaultSlot fault) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= batch) return;
  const long long w = static_cast<long long>(indices[i]);
  if (w < 0 || w + seq > max_seq) Report(fault, FaultKind::kBadIndex, i, w);
}

// The fused check of a small batch (kFusedCheckMaxIndices): every thread block reads all
// write indices and the block reports, through block 0 only, whether any is bad.
template <typename Index>
__device__ bool BlockFindsBadWriteIndex(const Index* indices, uint32_t batch, uint32_t seq,
                                        uint32_t max_seq, FaultSlot fault) {
  bool bad = false;
  for (uint32_t i = threadIdx.x; i < batch; i += blockDim.x) {
    const long long w = static_cast<long long>(indices[i]);
    if (w < 0 || w + seq > max_seq) {
      bad = true;
      if (blockIdx.x == 0) Report(fault, FaultKind::kBadIndex, i, w);
    }
  }
  return __syncthreads_or(bad) != 0;
}

// Thread block b copies chunk b % chunks of (sequence, head) plane b / chunks: the update's
// rows of one plane land in one contiguous run of the cache, so a plane is cut in chunks
// like a block in CopyBlocks. Neighbouring thread blocks copy neighbouring chunks.
template <typename Unit, typename Index, bool kFusedCheck>
__global__ void LinearUpdate(char* cache, const char* update, const Index* indices, uint32_t batch,
                             uint32_t heads, uint32_t max_seq, uint32_t seq, size_t row_bytes,
                             uint32_t chunks, FaultSlot fault) {
  if constexpr (kFusedCheck) {
    if (BlockFindsBadWriteIndex(indices, batch, seq, max_seq, fault)) return;
  } else {
    if (Faulted(fault)) return;
  }
  const size_t plane = blockIdx.x / chunks;
  const size_t chunk = blockIdx.x % chunks;
  const auto w = static_cast<size_t>(indices[plane / heads]);
  auto* dst = reinterpret_cast<Unit*>(cache + (plane * max_seq + w) * row_bytes);
  const auto* src = reinterpret_cast<const Unit*>(update + plane * seq * row_bytes);
  const size_t units = seq * row_bytes / sizeof(Unit);
  constexpr size_t kChunkUnits = size_t{kThreads} * kUnroll;
  CopyChunk(dst, src, chunk * kChunkUnits, min(units, (chunk + 1) * kChunkUnits));
}

template <typename Unit, typename Index>
void LaunchLinearUnits(const LinearUpdateArgs& a, size_t row_bytes, FaultSlot fault,
                       cudaStream_t s) {
  const size_t units = a.seq * row_bytes / sizeof(Unit);
  const auto chunks =
      static_cast<uint32_t>((units + kThreads * kUnroll - 1) / (kThreads * kUnroll));
  const auto* indices = static_cast<const Index*>(a.write_indices);
  auto* cache = static_cast<char*>(a.cache);
  const auto* update = static_cast<const char*>(a.update);
  const unsigned grid = a.batch * a.heads * chunks;
  if (a.batch <= kFusedCheckMaxIndices) {
    LinearUpdate<Unit, Index, true><<<grid, kThreads, 0, s>>>(
        cache, update, indices, a.batch, a.heads, a.max_seq, a.seq, row_bytes, chunks, fault);
    return;
  }
  CheckWriteIndices<<<GridFor(a.batch), kThreads, 0, s>>>(indices, a.batch, a.seq, a.max_seq,
                                                          fault);
  LinearUpdate<Unit, Index, false><<<grid, kThreads, 0, s>>>(
      cache, update, indices, a.batch, a.heads, a.max_seq, a.seq, row_bytes, chunks, fault);
}

template <typename Index>
void LaunchLinearTyped(const LinearUpdateArgs& a, size_t row_bytes, bool vector, FaultSlot fault,
                       cudaStream_t s) {
  if (vector)
    LaunchLinearUnits<int4, Index>(a, row_bytes, fault, s);
  else if (row_bytes % 4 == 0)
    LaunchLinearUnits<uint32_t, Index>(a, row_bytes, fault, s);
  else
    LaunchLinearUnits<uint16_t, Index>(a, row_bytes, fault, s);
}

__global__ void CheckSlots(const int64_t* slots, uint32_t tokens, long long pool_slots,
                           FaultSlot fault) {
  const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= tokens) return;
  const long long slot = slots[t];
  if (slot < -1 || slot >= pool_slots) Report(fault, FaultKind::kBadIndex, t, slot);
}

// The fused check of a small batch of tokens (kFusedCheckMaxIndices), as for the linear update.
__device__ bool BlockFindsBadSlot(const int64_t* slots, uint32_t tokens, long long pool_slots,
                                  FaultSlot fault) {
  bool bad = false;
  for (uint32_t t = threadIdx.x; t < tokens; t += blockDim.x) {
    const long long slot = slots[t];
    if (slot < -1 || slot >= pool_slots) {
      bad = true;
      if (blockIdx.x == 0) Report(fault, FaultKind::kBadIndex, t, slot);
    }
  }
  return __syncthreads_or(bad) != 0;
}

// One thread block per token: every KV head's run of head_bytes.
template <typename Unit, bool kFusedCheck>
__global__ void PagedUpdate(char* pool, long long pool_slots, const char* update,
                            const int64_t* slots, uint32_t tokens, uint32_t tokens_per_block,
                            size_t block_bytes, size_t layer_part_offset, size_t head_run_bytes,
                            uint32_t heads, size_t head_bytes, FaultSlot fault) {
  if constexpr (kFusedCheck) {
    if (BlockFindsBadSlot(slots, tokens, pool_slots, fault)) return;
  } else {
    if (Faulted(fault)) return;
  }
  const long long slot = slots[blockIdx.x];
  if (slot < 0) return;  // padding
  char* base = pool + static_cast<size_t>(slot / tokens_per_block) * block_bytes +
               layer_part_offset + static_cast<size_t>(slot % tokens_per_block) * head_bytes;
  const char* src = update + static_cast<size_t>(blockIdx.x) * heads * head_bytes;
  const size_t units_per_head = head_bytes / sizeof(Unit);
  for (size_t k = threadIdx.x; k < heads * units_per_head; k += blockDim.x) {
    const size_t h = k / units_per_head;
    const size_t u = k % units_per_head;
    reinterpret_cast<Unit*>(base + h * head_run_bytes)[u] =
        reinterpret_cast<const Unit*>(src + h * head_bytes)[u];
  }
}

template <typename Unit>
void LaunchPagedUnits(const PagedUpdateArgs& a, FaultSlot fault, cudaStream_t s) {
  const KvLayout& layout = *a.layout;
  const auto pool_slots = static_cast<long long>(a.pool_blocks * layout.tokens_per_block());
  const size_t head_bytes = layout.bytes_per_head_row();
  const size_t offset = layout.ByteOffset(a.layer, a.part, 0, 0);
  auto* pool = static_cast<char*>(a.pool);
  const auto* update = static_cast<const char*>(a.update);
  if (a.tokens <= kFusedCheckMaxIndices) {
    PagedUpdate<Unit, true><<<a.tokens, 128, 0, s>>>(
        pool, pool_slots, update, a.slot_mapping, a.tokens, layout.tokens_per_block(),
        layout.bytes_per_block(), offset, layout.bytes_per_head_run(), layout.num_kv_heads(),
        head_bytes, fault);
    return;
  }
  CheckSlots<<<GridFor(a.tokens), kThreads, 0, s>>>(a.slot_mapping, a.tokens, pool_slots, fault);
  PagedUpdate<Unit, false><<<a.tokens, 128, 0, s>>>(
      pool, pool_slots, update, a.slot_mapping, a.tokens, layout.tokens_per_block(),
      layout.bytes_per_block(), offset, layout.bytes_per_head_run(), layout.num_kv_heads(),
      head_bytes, fault);
}

__global__ void CheckBlockIds(const uint32_t* ids, uint32_t count, size_t pool_blocks,
                              unsigned long long* stamps, FaultSlot fault) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const uint32_t id = ids[i];
  if (id >= pool_blocks) {
    Report(fault, FaultKind::kBadIndex, i, id);
    return;
  }
  if (stamps != nullptr && atomicExch(&stamps[id], fault.generation) == fault.generation) {
    Report(fault, FaultKind::kRepeatedBlock, i, id);
  }
}

// The fused check of a small batch (kFusedCheckMaxIndices): every thread block reads all
// ids and checks their range and, for a scatter, repeats. Repeats go through an open-
// addressing set in shared memory, four slots per id (a probe or two each, with shared
// atomics): comparing each id with every earlier one cost a 512 MiB scatter of 256 blocks
// a third of its bandwidth on an H100. Block 0 alone reports.
constexpr uint32_t kIdSetSlots = 4 * kFusedCheckMaxIndices;
static_assert((kIdSetSlots & (kIdSetSlots - 1)) == 0, "probing wraps with a mask");
constexpr unsigned long long kEmptySlot = ~0ull;  // no 32-bit id is equal to it
constexpr int kIdSetBits = __builtin_ctz(kIdSetSlots);

__device__ bool BlockFindsBadBlockId(const uint32_t* ids, uint32_t count, size_t pool_blocks,
                                     bool check_repeats, FaultSlot fault) {
  __shared__ unsigned long long id_set[kIdSetSlots];
  if (check_repeats) {
    for (uint32_t k = threadIdx.x; k < kIdSetSlots; k += blockDim.x) id_set[k] = kEmptySlot;
    __syncthreads();
  }
  bool bad = false;
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) {
    const uint32_t id = ids[i];
    if (id >= pool_blocks) {
      bad = true;
      if (blockIdx.x == 0) Report(fault, FaultKind::kBadIndex, i, id);
      continue;
    }
    if (!check_repeats) continue;
    // Fibonacci hashing: the product's top bits, so ids of a common stride still spread.
    for (uint32_t slot = (id * 2654435761u) >> (32 - kIdSetBits);;
         slot = (slot + 1) & (kIdSetSlots - 1)) {
      const unsigned long long found = atomicCAS(&id_set[slot], kEmptySlot, id);
      if (found == kEmptySlot) break;  // first sight of id
      if (found == id) {
        bad = true;
        if (blockIdx.x == 0) Report(fault, FaultKind::kRepeatedBlock, i, id);
        break;
      }
    }
  }
  return __syncthreads_or(bad) != 0;
}

// Thread block (i, chunk): one chunk of block i (kThreads * kUnroll 16-byte units).
template <bool kFusedCheck>
__global__ void CopyBlocks(char* pool, size_t pool_blocks, char* staging, const uint32_t* ids,
                           uint32_t count, size_t block_bytes, uint32_t chunks_per_block,
                           bool to_staging, FaultSlot fault) {
  if constexpr (kFusedCheck) {
    if (BlockFindsBadBlockId(ids, count, pool_blocks, /*check_repeats=*/!to_staging, fault)) return;
  } else {
    if (Faulted(fault)) return;
  }
  const uint32_t i = blockIdx.x / chunks_per_block;
  constexpr size_t kChunkUnits = size_t{kThreads} * kUnroll;
  const size_t begin = static_cast<size_t>(blockIdx.x % chunks_per_block) * kChunkUnits;
  const size_t end = min(begin + kChunkUnits, block_bytes / 16);
  auto* block = reinterpret_cast<int4*>(pool + static_cast<size_t>(ids[i]) * block_bytes);
  auto* staged = reinterpret_cast<int4*>(staging + static_cast<size_t>(i) * block_bytes);
  if (to_staging)
    CopyChunk(staged, block, begin, end);
  else
    CopyChunk(block, staged, begin, end);
}

}  // namespace

void LaunchLinearUpdate(const LinearUpdateArgs& a, size_t row_bytes, bool vector, FaultSlot fault,
                        cudaStream_t s) {
  if (a.index_type == IndexType::kInt32)
    LaunchLinearTyped<int32_t>(a, row_bytes, vector, fault, s);
  else
    LaunchLinearTyped<int64_t>(a, row_bytes, vector, fault, s);
}

void LaunchCheckSlots(const int64_t* slots, uint32_t tokens, long long pool_slots, FaultSlot fault,
                      cudaStream_t s) {
  CheckSlots<<<GridFor(tokens), kThreads, 0, s>>>(slots, tokens, pool_slots, fault);
}

void LaunchPagedUpdate(const PagedUpdateArgs& a, FaultSlot fault, cudaStream_t s) {
  const size_t head_bytes = a.layout->bytes_per_head_row();
  const bool vector = head_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(a.pool) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(a.update) % 16 == 0;
  if (vector)
    LaunchPagedUnits<int4>(a, fault, s);
  else
    LaunchPagedUnits<uint16_t>(a, fault, s);
}

void LaunchCopyBlocks(const BlockCopyArgs& a, bool to_staging, unsigned long long* stamps,
                      FaultSlot fault, cudaStream_t s) {
  constexpr size_t kChunkBytes = size_t{kThreads} * kUnroll * 16;
  const auto chunks = static_cast<uint32_t>((a.block_bytes + kChunkBytes - 1) / kChunkBytes);
  auto* pool = static_cast<char*>(a.pool);
  auto* staging = static_cast<char*>(a.staging);
  if (a.count <= kFusedCheckMaxIndices) {
    CopyBlocks<true><<<a.count * chunks, kThreads, 0, s>>>(pool, a.pool_blocks, staging,
                                                           a.block_ids, a.count, a.block_bytes,
                                                           chunks, to_staging, fault);
    return;
  }
  CheckBlockIds<<<GridFor(a.count), kThreads, 0, s>>>(a.block_ids, a.count, a.pool_blocks, stamps,
                                                      fault);
  CopyBlocks<false><<<a.count * chunks, kThreads, 0, s>>>(
      pool, a.pool_blocks, staging, a.block_ids, a.count, a.block_bytes, chunks, to_staging, fault);
}

}  // namespace kvtier::gpu::internal
