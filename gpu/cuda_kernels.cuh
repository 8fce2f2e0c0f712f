// Launchers of the CUDA kernels (internal to gpu/; compiled only with the CUDA sources).
// Each launcher enqueues a validation kernel, when the call has indices to check, and the
// work kernel on `stream`; arguments were checked on the host (kernel_checks.h) before.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/kernels.h"

namespace kvtier::gpu::internal {

enum class FaultKind : uint32_t { kNone = 0, kBadIndex, kRepeatedBlock, kBadLength, kBadTableEntry };

// The first failure a validation kernel found; all zero when none. Written once, by the
// thread that wins the compare-and-swap on `failed`.
struct DeviceFault {
  uint32_t failed;
  FaultKind kind;
  uint32_t position;  // batch element, token, block position or sequence
  uint32_t sub;       // block table entry
  long long value;    // the offending value
};

__device__ inline void Report(DeviceFault* fault, FaultKind kind, uint32_t position, long long value,
                              uint32_t sub = 0) {
  if (atomicCAS(&fault->failed, 0u, 1u) == 0u) {
    fault->kind = kind;
    fault->position = position;
    fault->value = value;
    fault->sub = sub;
  }
}

// Work kernels start with this: a fault recorded by the validation kernel before them on
// the same stream means the call writes nothing.
__device__ inline bool Faulted(const DeviceFault* fault) {
  return *reinterpret_cast<const volatile uint32_t*>(&fault->failed) != 0;
}

void LaunchLinearUpdate(const LinearUpdateArgs& args, size_t row_bytes, bool vector, DeviceFault* fault,
                        cudaStream_t stream);
void LaunchPagedUpdate(const PagedUpdateArgs& args, DeviceFault* fault, cudaStream_t stream);
// bitmap: one bit per pool block, zeroed, for Scatter's repeat check; null for Gather.
void LaunchCopyBlocks(const BlockCopyArgs& args, bool to_staging, uint32_t* bitmap, DeviceFault* fault,
                      cudaStream_t stream);
void LaunchQuantize(const QuantizeArgs& args, cudaStream_t stream);
void LaunchDequantize(const DequantizeArgs& args, cudaStream_t stream);
void LaunchDecodeAttention(const DecodeAttentionArgs& args, DeviceFault* fault, cudaStream_t stream);

}  // namespace kvtier::gpu::internal
