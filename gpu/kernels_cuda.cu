// The CUDA backend. Each operation is a validation kernel (every index of the call is
// checked; the first failure found is recorded in a device-side fault record) followed by
// the work kernel, which does nothing when a fault was recorded: a failed call writes
// nothing, and a batch costs two launches however many blocks or tokens it has. The call
// then waits for its stream and turns a fault into the same Status the CPU backend gives.
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

std::string CudaError(const char* what, cudaError_t err) {
  return std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

class CudaBackend final : public KernelBackend {
 public:
  static Result<std::unique_ptr<KernelBackend>> Create(int device) {
    if (cudaError_t err = cudaSetDevice(device); err != cudaSuccess) {
      return UnavailableError(CudaError("cudaSetDevice", err));
    }
    auto backend = std::unique_ptr<CudaBackend>(new CudaBackend(device));
    if (cudaError_t err = cudaStreamCreateWithFlags(&backend->stream_, cudaStreamNonBlocking); err != cudaSuccess) {
      return UnavailableError(CudaError("cudaStreamCreate", err));
    }
    if (cudaError_t err = cudaMalloc(&backend->fault_, sizeof(DeviceFault)); err != cudaSuccess) {
      return ResourceExhaustedError(CudaError("cudaMalloc", err));
    }
    return std::unique_ptr<KernelBackend>(std::move(backend));
  }

  ~CudaBackend() override {
    if (bitmap_ != nullptr) cudaFree(bitmap_);
    if (fault_ != nullptr) cudaFree(fault_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  std::string_view name() const override { return "cuda"; }

  Status UpdateLinear(const LinearUpdateArgs& a) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckLinearUpdate(a));
    KVTIER_RETURN_IF_ERROR(Begin());
    const size_t row_bytes = size_t{a.head_size} * DtypeBytes(a.dtype);
    const bool vector = row_bytes % 16 == 0 && Aligned16(a.cache) && Aligned16(a.update);
    internal::LaunchLinearUpdate(a, row_bytes, vector, fault_, stream_);
    return Finish([&](const DeviceFault& f) { return internal::BadWriteIndex(f.position, f.value, a.seq, a.max_seq); });
  }

  Status UpdatePaged(const PagedUpdateArgs& a) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckPagedUpdate(a));
    KVTIER_RETURN_IF_ERROR(Begin());
    const size_t pool_slots = a.pool_blocks * a.layout->tokens_per_block();
    internal::LaunchPagedUpdate(a, fault_, stream_);
    return Finish([&](const DeviceFault& f) { return internal::BadSlot(f.position, f.value, pool_slots); });
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
    internal::LaunchDecodeAttention(a, fault_, stream_);
    const uint32_t max_tokens = a.max_blocks_per_sequence * a.layout->tokens_per_block();
    return Finish([&](const DeviceFault& f) {
      if (f.kind == FaultKind::kBadLength) return internal::BadContextLength(f.position, f.value, max_tokens);
      return internal::BadBlockTableEntry(f.position, f.sub, f.value, a.pool_blocks);
    });
  }

  Result<void*> Allocate(MemoryKind kind, size_t bytes) override {
    void* p = nullptr;
    const cudaError_t err = kind == MemoryKind::kDevice
                                ? cudaMalloc(&p, bytes)
                                : cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (err != cudaSuccess) {
      return ResourceExhaustedError(CudaError(kind == MemoryKind::kDevice ? "cudaMalloc" : "cudaHostAlloc", err) +
                                    " of " + std::to_string(bytes) + " bytes");
    }
    return p;
  }

  void Free(MemoryKind kind, void* pointer) override {
    if (kind == MemoryKind::kDevice) cudaFree(pointer);
    else cudaFreeHost(pointer);
  }

  Status Copy(void* dst, const void* src, size_t bytes) override {
    if (cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault); err != cudaSuccess) {
      return InternalError(CudaError("cudaMemcpy", err));
    }
    return Status::Ok();
  }

 private:
  explicit CudaBackend(int device) : device_(device) {}

  Status CopyBlocks(const BlockCopyArgs& a, bool to_staging) {
    KVTIER_RETURN_IF_ERROR(internal::CheckBlockCopy(a));
    if (!Aligned16(a.pool) || !Aligned16(a.staging)) {
      return InvalidArgumentError("Gather/Scatter: pool and staging must be 16-byte aligned (DeviceBuffer memory is)");
    }
    KVTIER_RETURN_IF_ERROR(Begin());
    uint32_t* bitmap = nullptr;
    if (!to_staging) {  // repeats are detected with one bit per pool block, cleared per call
      KVTIER_RETURN_IF_ERROR(EnsureBitmap(a.pool_blocks));
      bitmap = bitmap_;
      cudaMemsetAsync(bitmap_, 0, (a.pool_blocks + 31) / 32 * sizeof(uint32_t), stream_);
    }
    internal::LaunchCopyBlocks(a, to_staging, bitmap, fault_, stream_);
    return Finish([&](const DeviceFault& f) {
      if (f.kind == FaultKind::kRepeatedBlock) return internal::RepeatedBlockId(f.position, static_cast<uint32_t>(f.value));
      return internal::BadBlockId(f.position, f.value, a.pool_blocks);
    });
  }

  Status EnsureBitmap(size_t bits) {
    if (bits <= bitmap_bits_) return Status::Ok();
    if (bitmap_ != nullptr) cudaFree(bitmap_);
    bitmap_ = nullptr;
    bitmap_bits_ = 0;
    if (cudaError_t err = cudaMalloc(&bitmap_, (bits + 31) / 32 * sizeof(uint32_t)); err != cudaSuccess) {
      return ResourceExhaustedError(CudaError("cudaMalloc", err));
    }
    bitmap_bits_ = bits;
    return Status::Ok();
  }

  Status Begin() {
    if (cudaError_t err = cudaSetDevice(device_); err != cudaSuccess) return UnavailableError(CudaError("cudaSetDevice", err));
    if (cudaError_t err = cudaMemsetAsync(fault_, 0, sizeof(DeviceFault), stream_); err != cudaSuccess) {
      return InternalError(CudaError("cudaMemsetAsync", err));
    }
    return Status::Ok();
  }

  template <typename FaultToStatus>
  Status Finish(FaultToStatus&& to_status) {
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return InternalError(CudaError("kernel launch", err));
    DeviceFault fault{};
    cudaError_t err = cudaMemcpyAsync(&fault, fault_, sizeof(fault), cudaMemcpyDeviceToHost, stream_);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream_);
    if (err != cudaSuccess) return InternalError(CudaError("kernel", err));
    if (fault.failed != 0) return to_status(fault);
    return Status::Ok();
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  DeviceFault* fault_ = nullptr;
  uint32_t* bitmap_ = nullptr;
  size_t bitmap_bits_ = 0;
};

}  // namespace

Result<std::unique_ptr<KernelBackend>> MakeCudaBackend(int device_index) { return CudaBackend::Create(device_index); }

}  // namespace kvtier::gpu
