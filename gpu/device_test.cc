#include "gpu/device.h"

#include <gtest/gtest.h>

namespace kvtier::gpu {
namespace {

TEST(DeviceTest, ProbeAlwaysAnswersAndExplainsTheCpuPath) {
  const DeviceProbe probe = ProbeDevices();
  if (!probe.has_gpu()) {
    EXPECT_FALSE(probe.cpu_reason.empty()) << "the CPU path must say why";
    EXPECT_EQ(DeviceSelfTest(0).code(), StatusCode::kUnavailable);
  }
  LogDeviceSelection(probe);
}

TEST(DeviceTest, SelfTestKernelOnEveryDevice) {
  const DeviceProbe probe = ProbeDevices();
  if (!probe.has_gpu()) GTEST_SKIP() << "no GPU: " << probe.cpu_reason;
  for (const DeviceInfo& device : probe.devices) {
    EXPECT_TRUE(DeviceSelfTest(device.index).ok()) << device.name;
  }
}

}  // namespace
}  // namespace kvtier::gpu
