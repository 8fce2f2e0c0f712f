// Launchers of the CUDA kernels (internal to gpu/; compiled only with the CUDA sources).
// Each launcher enqueues the work kernel on `stream`, behind a validation kernel when the
// call has more indices to check than kFusedCheckMaxIndices; arguments were checked on
// the host (kernel_checks.h) before.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/kernels.h"

namespace kvtier::gpu::internal {

// The copy kernels' thread blocks each move one chunk of kUnitsPerChunk units (16, 4 or
// 2 bytes each, by alignment): 256 threads x 4 units.
inline constexpr size_t kUnitsPerChunk = 1024;

enum class FaultKind : uint32_t {
  kNone = 0,
  kBadIndex,
  kRepeatedBlock,
  kBadLength,
  kBadTableEntry,
  kBadQueryStart
};

// The first failure a call found, stamped with the call's generation. Every call takes a
// new generation, so nothing is reset between calls (one stream operation fewer per call):
// a record of an older generation means "no fault in this call". Two copies: `record` in
// device memory, whose generation the work kernels poll (a poll of host memory would
// cross the bus once per thread block), and `mirror` in mapped pinned host memory, which
// the reporting thread writes directly: the host reads it after its stream wait, so a
// call needs no read-back copy (on an H100 the copy and its wait were a few of a small
// batch's microseconds). Written once per generation, by the thread whose atomicMax
// first raises the device record's generation to the call's.
struct DeviceFault {
  unsigned long long generation;
  FaultKind kind;
  uint32_t position;  // batch element, token, block position or sequence
  uint32_t sub;       // block table entry
  long long value;    // the offending value
};

// What kernels get: the two records and the generation of the call they belong to (never 0).
struct FaultSlot {
  DeviceFault* record;
  DeviceFault* mirror;  // device pointer of the mapped host copy
  unsigned long long generation;
};

__device__ inline void Report(FaultSlot fault, FaultKind kind, uint32_t position, long long value,
                              uint32_t sub = 0) {
  if (atomicMax(&fault.record->generation, fault.generation) < fault.generation) {
    volatile DeviceFault* mirror = fault.mirror;
    mirror->kind = kind;
    mirror->position = position;
    mirror->value = value;
    mirror->sub = sub;
    __threadfence_system();  // the fields before the generation that vouches for them
    mirror->generation = fault.generation;
  }
}

// Work kernels behind a validation kernel start with this: a fault recorded before them
// on the same stream means the call writes nothing.
__device__ inline bool Faulted(FaultSlot fault) {
  return *reinterpret_cast<const volatile unsigned long long*>(&fault.record->generation) ==
         fault.generation;
}

// Batches of at most this many indices are checked by every thread block of the work
// kernel itself, one launch in all: each block reads the whole index list (from L2 after
// the first) and writes only when every index is good, so all blocks agree without a
// grid-wide barrier. Larger batches keep a validation kernel before the work kernel,
// whose fixed cost they amortize.
inline constexpr uint32_t kFusedCheckMaxIndices = 256;

void LaunchLinearUpdate(const LinearUpdateArgs& args, size_t row_bytes, bool vector,
                        FaultSlot fault, cudaStream_t stream);
void LaunchPagedUpdate(const PagedUpdateArgs& args, FaultSlot fault, cudaStream_t stream);
// A slot mapping's check on its own (a slot below -1 or past the pool is a kBadIndex fault).
void LaunchCheckSlots(const int64_t* slots, uint32_t tokens, long long pool_slots, FaultSlot fault,
                      cudaStream_t stream);
// The same into a quantized pool (cuda_quantized_update.cu): a validation kernel, then a
// warp per (token, head) row.
void LaunchQuantizedPagedUpdate(const PagedUpdateArgs& args, FaultSlot fault, cudaStream_t stream);
// stamps: one per pool block, for Scatter's repeat check (a block stamped twice with the
// call's generation is repeated); null for Gather.
void LaunchCopyBlocks(const BlockCopyArgs& args, bool to_staging, unsigned long long* stamps,
                      FaultSlot fault, cudaStream_t stream);
void LaunchQuantize(const QuantizeArgs& args, cudaStream_t stream);
void LaunchDequantize(const DequantizeArgs& args, cudaStream_t stream);
void LaunchDecodeAttention(const DecodeAttentionArgs& args, FaultSlot fault, cudaStream_t stream);
void LaunchChunkedAttention(const ChunkedAttentionArgs& args, FaultSlot fault, cudaStream_t stream);

}  // namespace kvtier::gpu::internal
