// SharedDeviceMemory in a build without the CUDA sources: no device to share.
#include "gpu/shared_device_memory.h"

namespace kvtier::gpu {

Result<SharedDeviceMemory> SharedDeviceMemory::Create(int device, size_t) {
  return UnavailableError("GPU " + std::to_string(device) + ": this build has no CUDA sources");
}

Result<SharedDeviceMemory> SharedDeviceMemory::Open(int device, const IpcHandle&, size_t) {
  return UnavailableError("GPU " + std::to_string(device) + ": this build has no CUDA sources");
}

void SharedDeviceMemory::Release() { data_ = nullptr; }

}  // namespace kvtier::gpu
