// SharedDeviceMemory over the CUDA runtime's IPC calls.
#include <cuda_runtime.h>

#include <cstring>

#include "gpu/shared_device_memory.h"

namespace kvtier::gpu {
namespace {

std::string CudaError(const char* what, cudaError_t err) {
  return std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
}

static_assert(sizeof(cudaIpcMemHandle_t) == IpcHandle::kBytes);

}  // namespace

Result<SharedDeviceMemory> SharedDeviceMemory::Create(int device, size_t bytes) {
  if (bytes == 0) return InvalidArgumentError("shared device memory: size must be positive");
  if (cudaError_t err = cudaSetDevice(device); err != cudaSuccess)
    return UnavailableError(CudaError("cudaSetDevice", err));
  void* data = nullptr;
  if (cudaError_t err = cudaMalloc(&data, bytes); err != cudaSuccess) {
    return ResourceExhaustedError(CudaError("cudaMalloc", err) + " of " + std::to_string(bytes) +
                                  " bytes");
  }
  cudaIpcMemHandle_t raw;
  cudaError_t err = cudaMemset(data, 0, bytes);
  if (err == cudaSuccess) err = cudaIpcGetMemHandle(&raw, data);
  if (err != cudaSuccess) {
    cudaFree(data);
    return UnavailableError(CudaError("exporting device memory", err));
  }
  IpcHandle handle;
  std::memcpy(handle.bytes.data(), &raw, IpcHandle::kBytes);
  return SharedDeviceMemory(data, bytes, device, handle, /*owner=*/true);
}

Result<SharedDeviceMemory> SharedDeviceMemory::Open(int device, const IpcHandle& handle,
                                                    size_t bytes) {
  if (cudaError_t err = cudaSetDevice(device); err != cudaSuccess)
    return UnavailableError(CudaError("cudaSetDevice", err));
  cudaIpcMemHandle_t raw;
  std::memcpy(&raw, handle.bytes.data(), IpcHandle::kBytes);
  void* data = nullptr;
  const cudaError_t err = cudaIpcOpenMemHandle(&data, raw, cudaIpcMemLazyEnablePeerAccess);
  if (err == cudaErrorDeviceUninitialized) {  // the runtime's name for CUDA_ERROR_INVALID_CONTEXT
    cudaGetLastError();
    return FailedPreconditionError(
        CudaError("cudaIpcOpenMemHandle", err) +
        ": a CUDA IPC handle cannot be opened by the process that created it");
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    return InvalidArgumentError(CudaError("cudaIpcOpenMemHandle", err));
  }
  return SharedDeviceMemory(data, bytes, device, handle, /*owner=*/false);
}

void SharedDeviceMemory::Release() {
  if (data_ == nullptr) return;
  cudaSetDevice(device_);
  if (owner_)
    cudaFree(data_);
  else
    cudaIpcCloseMemHandle(data_);
  data_ = nullptr;
}

}  // namespace kvtier::gpu
