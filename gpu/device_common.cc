#include <spdlog/spdlog.h>

#include "gpu/device.h"

namespace kvtier::gpu {

void LogDeviceSelection(const DeviceProbe& probe) {
  if (!probe.has_gpu()) {
    spdlog::info("no usable GPU: {}; using the CPU path", probe.cpu_reason);
    return;
  }
  const DeviceInfo& d = probe.devices.front();
  spdlog::info(
      "using GPU {} ({}, {:.1f} GiB, sm_{}{}){}", d.index, d.name,
      static_cast<double>(d.total_memory_bytes) / (1ull << 30), d.compute_capability_major,
      d.compute_capability_minor,
      probe.devices.size() > 1 ? fmt::format("; {} GPUs visible", probe.devices.size()) : "");
}

}  // namespace kvtier::gpu
