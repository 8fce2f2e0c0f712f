// The device probe of a build without the CUDA sources.
#include "gpu/device.h"

namespace kvtier::gpu {

DeviceProbe ProbeDevices() {
  DeviceProbe probe;
  probe.cpu_reason = "built without CUDA (KVTIER_CUDA=OFF, or nvcc was not found at build time)";
  return probe;
}

Result<size_t> FreeDeviceMemory(int device_index) {
  return UnavailableError("GPU " + std::to_string(device_index) +
                          ": this build has no CUDA sources");
}

Status DeviceSelfTest(int device_index) {
  return UnavailableError("GPU " + std::to_string(device_index) +
                          ": this build has no CUDA sources");
}

}  // namespace kvtier::gpu
