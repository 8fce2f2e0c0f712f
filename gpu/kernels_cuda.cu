// The CUDA backend. Each operation is one work kernel that checks every index of the
// call before any thread writes: a small batch (kFusedCheckMaxIndices) is checked by each
// thread block of the work kernel itself; a larger one by a validation kernel launched
// before it, whose fault the work kernel polls. A failed call writes nothing, and the
// first failure found is written by the device into a mapped host record under the call's
// generation. The call then waits for its stream and turns a fault into the same Status
// the CPU backend gives. Nothing is reset between calls (generations tell calls apart),
// so the fixed cost of a call is one launch (two for large batches) and one wait.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <string>

#include "gpu/cuda_kernels.cuh"
#include "gpu/kernel_checks.h"
#include "gpu/kernels.h"

namespace kvtier::gpu {
namespace {

using internal::DeviceFault;
using internal::FaultKind;
using internal::FaultSlot;

std::string CudaError(const char* what, cudaError_t err) {
  return std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The copy kernels run one thread block per chunk; a grid has at most 2^31 - 1 of them.
Status FitsOneLaunch(const char* what, uint64_t runs, uint64_t chunks_per_run) {
  if (runs * chunks_per_run > 0x7fffffffull) {
    return InvalidArgumentError(
        std::string(what) + ": " + std::to_string(runs * chunks_per_run) +
        " chunks is more than one launch can run (2^31 - 1); split the batch");
  }
  return Status::Ok();
}

class CudaBackend final : public KernelBackend {
 public:
  static Result<std::unique_ptr<KernelBackend>> Create(int device) {
    if (cudaError_t err = cudaSetDevice(device); err != cudaSuccess) {
      return UnavailableError(CudaError("cudaSetDevice", err));
    }
    auto backend = std::unique_ptr<CudaBackend>(new CudaBackend(device));
    if (cudaError_t err = cudaStreamCreateWithFlags(&backend->stream_, cudaStreamNonBlocking);
        err != cudaSuccess) {
      return UnavailableError(CudaError("cudaStreamCreate", err));
    }
    if (cudaError_t err = cudaMalloc(&backend->fault_, sizeof(DeviceFault)); err != cudaSuccess) {
      return ResourceExhaustedError(CudaError("cudaMalloc", err));
    }
    if (cudaError_t err = cudaMemset(backend->fault_, 0, sizeof(DeviceFault)); err != cudaSuccess) {
      return InternalError(CudaError("cudaMemset", err));
    }
    if (cudaError_t err =
            cudaHostAlloc(&backend->host_fault_, sizeof(DeviceFault), cudaHostAllocMapped);
        err != cudaSuccess) {
      return ResourceExhaustedError(CudaError("cudaHostAlloc", err));
    }
    backend->host_fault_->generation = 0;
    if (cudaError_t err =
            cudaHostGetDevicePointer(&backend->mirror_fault_, backend->host_fault_, 0);
        err != cudaSuccess) {
      return InternalError(CudaError("cudaHostGetDevicePointer", err));
    }
    return std::unique_ptr<KernelBackend>(std::move(backend));
  }

  ~CudaBackend() override {
    if (stamps_ != nullptr) cudaFree(stamps_);
    if (fault_ != nullptr) cudaFree(fault_);
    if (host_fault_ != nullptr) cudaFreeHost(host_fault_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  std::string_view name() const override { return "cuda"; }

  Status UpdateLinear(const LinearUpdateArgs& a) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckLinearUpdate(a));
    KVTIER_RETURN_IF_ERROR(Begin());
    const size_t row_bytes = size_t{a.head_size} * DtypeBytes(a.dtype);
    const bool vector = row_bytes % 16 == 0 && Aligned16(a.cache) && Aligned16(a.update);
    const size_t unit = vector ? 16 : row_bytes % 4 == 0 ? 4 : 2;
    KVTIER_RETURN_IF_ERROR(
        FitsOneLaunch("UpdateLinear", uint64_t{a.batch} * a.heads,
                      (uint64_t{a.seq} * row_bytes / unit + internal::kUnitsPerChunk - 1) /
                          internal::kUnitsPerChunk));
    internal::LaunchLinearUpdate(a, row_bytes, vector, Slot(), stream_);
    return Finish([&](const DeviceFault& f) {
      return internal::BadWriteIndex(f.position, f.value, a.seq, a.max_seq);
    });
  }

  Status UpdatePaged(const PagedUpdateArgs& a) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckPagedUpdate(a));
    KVTIER_RETURN_IF_ERROR(Begin());
    const size_t pool_slots = a.pool_blocks * a.layout->tokens_per_block();
    if (a.layout->quantized())
      internal::LaunchQuantizedPagedUpdate(a, Slot(), stream_);
    else
      internal::LaunchPagedUpdate(a, Slot(), stream_);
    return Finish(
        [&](const DeviceFault& f) { return internal::BadSlot(f.position, f.value, pool_slots); });
  }

  Status Gather(const BlockCopyArgs& a) override { return CopyBlocks(a, /*to_staging=*/true); }
  Status Scatter(const BlockCopyArgs& a) override { return CopyBlocks(a, /*to_staging=*/false); }

  Status Quantize(const QuantizeArgs& a) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckQuantize(a));
    KVTIER_RETURN_IF_ERROR(Begin());
    internal::LaunchQuantize(a, stream_);
    return Finish([](const DeviceFault&) { return InternalError("Quantize: unexpected fault"); });
  }

  Status Dequantize(const DequantizeArgs& a) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckDequantize(a));
    KVTIER_RETURN_IF_ERROR(Begin());
    internal::LaunchDequantize(a, stream_);
    return Finish([](const DeviceFault&) { return InternalError("Dequantize: unexpected fault"); });
  }

  Status DecodeAttention(const DecodeAttentionArgs& a) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckDecodeAttention(a));
    KVTIER_RETURN_IF_ERROR(Begin());
    internal::LaunchDecodeAttention(a, Slot(), stream_);
    const uint32_t max_tokens = a.max_blocks_per_sequence * a.layout->tokens_per_block();
    return Finish([&](const DeviceFault& f) {
      if (f.kind == FaultKind::kBadLength)
        return internal::BadContextLength(f.position, f.value, max_tokens);
      return internal::BadBlockTableEntry("DecodeAttention", f.position, f.sub, f.value,
                                          a.pool_blocks);
    });
  }

  Status ChunkedAttention(const ChunkedAttentionArgs& a) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckChunkedAttention(a));
    KVTIER_RETURN_IF_ERROR(Begin());
    internal::LaunchChunkedAttention(a, Slot(), stream_);
    const uint32_t max_tokens = a.max_blocks_per_sequence * a.layout->tokens_per_block();
    return Finish([&](const DeviceFault& f) {
      switch (f.kind) {
        case FaultKind::kBadQueryStart:
          return internal::BadQueryStart(f.position, f.value, a.query_tokens);
        case FaultKind::kBadLength:
          return internal::BadChunkContext(f.position, f.value, f.sub, max_tokens);
        default:
          return internal::BadBlockTableEntry("ChunkedAttention", f.position, f.sub, f.value,
                                              a.pool_blocks);
      }
    });
  }

  Result<void*> Allocate(MemoryKind kind, size_t bytes) override {
    void* p = nullptr;
    const cudaError_t err =
        kind == MemoryKind::kDevice
            ? cudaMalloc(&p, bytes)
            : cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (err != cudaSuccess) {
      return ResourceExhaustedError(
          CudaError(kind == MemoryKind::kDevice ? "cudaMalloc" : "cudaHostAlloc", err) + " of " +
          std::to_string(bytes) + " bytes");
    }
    return p;
  }

  void Free(MemoryKind kind, void* pointer) override {
    if (kind == MemoryKind::kDevice)
      cudaFree(pointer);
    else
      cudaFreeHost(pointer);
  }

  // cudaMemcpy returns before a device-to-device copy is done; the contract is that a
  // call's result is visible when it returns, so the copy goes on our stream and we wait.
  Status Copy(void* dst, const void* src, size_t bytes) override {
    if (cudaError_t err = cudaSetDevice(device_); err != cudaSuccess)
      return UnavailableError(CudaError("cudaSetDevice", err));
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream_);
    if (err != cudaSuccess) return InternalError(CudaError("cudaMemcpy", err));
    return Status::Ok();
  }

  Status Copy2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                size_t height) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckCopy2D(dst, dst_pitch, src, src_pitch, width, height));
    if (width == 0 || height == 0) return Status::Ok();
    if (cudaError_t err = cudaSetDevice(device_); err != cudaSuccess)
      return UnavailableError(CudaError("cudaSetDevice", err));
    cudaError_t err = cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height,
                                        cudaMemcpyDefault, stream_);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream_);
    if (err != cudaSuccess) return InternalError(CudaError("cudaMemcpy2D", err));
    return Status::Ok();
  }

 private:
  explicit CudaBackend(int device) : device_(device) {}

  Status CopyBlocks(const BlockCopyArgs& a, bool to_staging) {
    KVTIER_RETURN_IF_ERROR(internal::CheckBlockCopy(a));
    KVTIER_RETURN_IF_ERROR(FitsOneLaunch(
        to_staging ? "Gather" : "Scatter", a.count,
        (a.block_bytes / 16 + internal::kUnitsPerChunk - 1) / internal::kUnitsPerChunk));
    if (!Aligned16(a.pool) || !Aligned16(a.staging)) {
      return InvalidArgumentError(
          "Gather/Scatter: pool and staging must be 16-byte aligned (DeviceBuffer memory is)");
    }
    KVTIER_RETURN_IF_ERROR(Begin());
    unsigned long long* stamps = nullptr;
    if (!to_staging && a.count > internal::kFusedCheckMaxIndices) {
      // Repeats, in the validation kernel: a block stamped twice with this call's generation.
      KVTIER_RETURN_IF_ERROR(EnsureStamps(a.pool_blocks));
      stamps = stamps_;
    }
    internal::LaunchCopyBlocks(a, to_staging, stamps, Slot(), stream_);
    return Finish([&](const DeviceFault& f) {
      if (f.kind == FaultKind::kRepeatedBlock)
        return internal::RepeatedBlockId(f.position, static_cast<uint32_t>(f.value));
      return internal::BadBlockId(f.position, f.value, a.pool_blocks);
    });
  }

  // One generation stamp per pool block (zero: never stamped), grown to the largest pool seen.
  Status EnsureStamps(size_t blocks) {
    if (blocks <= stamp_count_) return Status::Ok();
    if (stamps_ != nullptr) cudaFree(stamps_);
    stamps_ = nullptr;
    stamp_count_ = 0;
    if (cudaError_t err = cudaMalloc(&stamps_, blocks * sizeof(unsigned long long));
        err != cudaSuccess) {
      return ResourceExhaustedError(CudaError("cudaMalloc", err));
    }
    if (cudaError_t err = cudaMemsetAsync(stamps_, 0, blocks * sizeof(unsigned long long), stream_);
        err != cudaSuccess) {
      return InternalError(CudaError("cudaMemsetAsync", err));
    }
    stamp_count_ = blocks;
    return Status::Ok();
  }

  FaultSlot Slot() const { return FaultSlot{fault_, mirror_fault_, generation_}; }

  Status Begin() {
    if (cudaError_t err = cudaSetDevice(device_); err != cudaSuccess)
      return UnavailableError(CudaError("cudaSetDevice", err));
    ++generation_;
    return Status::Ok();
  }

  template <typename FaultToStatus>
  Status Finish(FaultToStatus&& to_status) {
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess)
      return InternalError(CudaError("kernel launch", err));
    if (cudaError_t err = cudaStreamSynchronize(stream_); err != cudaSuccess)
      return InternalError(CudaError("kernel", err));
    // The device wrote the mirror (if it faulted) before the kernel ended; the wait orders it.
    const DeviceFault fault = *host_fault_;
    if (fault.generation == generation_) return to_status(fault);
    return Status::Ok();
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  DeviceFault* fault_ = nullptr;
  DeviceFault* host_fault_ = nullptr;    // mapped pinned: the mirror the device writes
  DeviceFault* mirror_fault_ = nullptr;  // its device pointer
  unsigned long long generation_ = 0;    // of the last call; 64 bits never wrap
  unsigned long long* stamps_ = nullptr;
  size_t stamp_count_ = 0;
};

}  // namespace

Result<std::unique_ptr<KernelBackend>> MakeCudaBackend(int device_index) {
  return CudaBackend::Create(device_index);
}

}  // namespace kvtier::gpu
