// The device probe of a build with the CUDA sources: asks the CUDA runtime.
#include <cuda_runtime.h>

#include <vector>

#include "gpu/device.h"

namespace kvtier::gpu {
namespace {

__global__ void FillPattern(unsigned int* out, unsigned int n, unsigned int seed) {
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * 2654435761u + seed;
}

std::string CudaError(const char* what, cudaError_t err) {
  return std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
}

}  // namespace

DeviceProbe ProbeDevices() {
  DeviceProbe probe;
  probe.cuda_compiled = true;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    probe.cpu_reason = CudaError("cudaGetDeviceCount", err);
    return probe;
  }
  if (count == 0) {
    probe.cpu_reason = "the CUDA driver reports no devices";
    return probe;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    probe.devices.push_back(DeviceInfo{i, prop.name, prop.totalGlobalMem, prop.major, prop.minor});
  }
  if (probe.devices.empty()) probe.cpu_reason = "no device answered cudaGetDeviceProperties";
  return probe;
}

Result<size_t> FreeDeviceMemory(int device_index) {
  if (cudaError_t err = cudaSetDevice(device_index); err != cudaSuccess) {
    return UnavailableError(CudaError("cudaSetDevice", err));
  }
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes); err != cudaSuccess) {
    return UnavailableError(CudaError("cudaMemGetInfo", err));
  }
  return free_bytes;
}

Status DeviceSelfTest(int device_index) {
  constexpr unsigned int kCount = 1 << 16;
  constexpr unsigned int kSeed = 12345;
  if (cudaError_t err = cudaSetDevice(device_index); err != cudaSuccess) {
    return UnavailableError(CudaError("cudaSetDevice", err));
  }
  unsigned int* device_buffer = nullptr;
  if (cudaError_t err = cudaMalloc(&device_buffer, kCount * sizeof(unsigned int));
      err != cudaSuccess) {
    return ResourceExhaustedError(CudaError("cudaMalloc", err));
  }
  FillPattern<<<(kCount + 255) / 256, 256>>>(device_buffer, kCount, kSeed);
  std::vector<unsigned int> host(kCount);
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) {
    err = cudaMemcpy(host.data(), device_buffer, kCount * sizeof(unsigned int),
                     cudaMemcpyDeviceToHost);
  }
  cudaFree(device_buffer);
  if (err != cudaSuccess) return InternalError(CudaError("self-test kernel", err));
  for (unsigned int i = 0; i < kCount; ++i) {
    if (host[i] != i * 2654435761u + kSeed) {
      return InternalError("self-test kernel wrote a wrong value at element " + std::to_string(i));
    }
  }
  return Status::Ok();
}

}  // namespace kvtier::gpu
