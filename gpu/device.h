// Device: which accelerator this process can use, found at run time.
//
// kvtier always builds and runs without a GPU: every kernel has a CPU reference with the
// same contract. ProbeDevices() says whether the CUDA path can be taken here: the build
// must include the CUDA sources (KVTIER_CUDA=AUTO with nvcc found, or ON), and a driver
// and at least one device must answer. When they do not, the caller takes the CPU path;
// LogDeviceSelection writes the one log line that says so and why.
//
// Thread safety: ProbeDevices may be called from any thread; it initializes the CUDA
// runtime on first use. DeviceSelfTest launches a kernel on the given device.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvtier::gpu {

struct DeviceInfo {
  int index = 0;
  std::string name;
  size_t total_memory_bytes = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
};

struct DeviceProbe {
  bool cuda_compiled = false;       // the binary contains the CUDA sources
  std::vector<DeviceInfo> devices;  // empty: use the CPU path
  std::string cpu_reason;           // why the CPU path, when devices is empty

  bool has_gpu() const { return !devices.empty(); }
};

[[nodiscard]] DeviceProbe ProbeDevices();

// One line: "using GPU 0 (NVIDIA H100, 79.1 GiB, sm_90)" or
// "no usable GPU: <reason>; using the CPU path".
void LogDeviceSelection(const DeviceProbe& probe);

// Free memory of `device` now (what pools are sized from). kUnavailable without a device.
[[nodiscard]] Result<size_t> FreeDeviceMemory(int device_index);

// Writes a pattern into device memory with a kernel and reads it back: proves that the
// device, driver and the compiled kernels agree. kUnavailable without a device.
[[nodiscard]] Status DeviceSelfTest(int device_index);

}  // namespace kvtier::gpu
