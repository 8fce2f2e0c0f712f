// Launchers of the CUDA kernels (internal to gpu/; compiled only with the CUDA sources).
// Each launcher enqueues a validation kernel, when the call has indices to check, and the
// work kernel on `stream`; arguments were checked on the host (kernel_checks.h) before.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/kernels.h"

namespace kvtier::gpu::internal {

// The copy kernels' thread blocks each move one chunk of kUnitsPerChunk units (16, 4 or
// 2 bytes each, by alignment): 256 threads x 4 units.
inline constexpr size_t kUnitsPerChunk = 1024;

enum class FaultKind : uint32_t { kNone = 0, kBadIndex, kRepeatedBlock, kBadLength, kBadTableEntry };

// The first failure a validation kernel found, stamped with the generation of the call
// that found it. Every call takes a new generation, so the record needs no reset between
// calls (one stream operation fewer per call): a record of an older generation means "no
// fault in this call". Written once per generation, by the thread whose atomicMax first
// raises `generation` to the call's.
struct DeviceFault {
  unsigned long long generation;
  FaultKind kind;
  uint32_t position;  // batch element, token, block position or sequence
  uint32_t sub;       // block table entry
  long long value;    // the offending value
};

// What kernels get: the record and the generation of the call they belong to (never 0).
struct FaultSlot {
  DeviceFault* record;
  unsigned long long generation;
};

__device__ inline void Report(FaultSlot fault, FaultKind kind, uint32_t position, long long value, uint32_t sub = 0) {
  if (atomicMax(&fault.record->generation, fault.generation) < fault.generation) {
    fault.record->kind = kind;
    fault.record->position = position;
    fault.record->value = value;
    fault.record->sub = sub;
  }
}

// Work kernels start with this: a fault recorded by the validation kernel before them on
// the same stream means the call writes nothing.
__device__ inline bool Faulted(FaultSlot fault) {
  return *reinterpret_cast<const volatile unsigned long long*>(&fault.record->generation) == fault.generation;
}

void LaunchLinearUpdate(const LinearUpdateArgs& args, size_t row_bytes, bool vector, FaultSlot fault,
                        cudaStream_t stream);
void LaunchPagedUpdate(const PagedUpdateArgs& args, FaultSlot fault, cudaStream_t stream);
// stamps: one per pool block, for Scatter's repeat check (a block stamped twice with the
// call's generation is repeated); null for Gather.
void LaunchCopyBlocks(const BlockCopyArgs& args, bool to_staging, unsigned long long* stamps, FaultSlot fault,
                      cudaStream_t stream);
void LaunchQuantize(const QuantizeArgs& args, cudaStream_t stream);
void LaunchDequantize(const DequantizeArgs& args, cudaStream_t stream);
void LaunchDecodeAttention(const DecodeAttentionArgs& args, FaultSlot fault, cudaStream_t stream);

}  // namespace kvtier::gpu::internal
