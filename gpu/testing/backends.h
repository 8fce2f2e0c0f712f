// Test helpers for gpu/: every kernel test runs on each backend this machine has (the CPU
// reference always; CUDA when a device answers), moving test data in and out of backend
// memory, so the same naive-loop checks cover both and CUDA is compared with the CPU.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "gpu/kernels.h"

namespace kvtier::gpu::testing {

inline std::vector<std::unique_ptr<KernelBackend>> TestBackends() {
  std::vector<std::unique_ptr<KernelBackend>> backends;
  backends.push_back(MakeCpuBackend());
  if (auto cuda = MakeCudaBackend(0); cuda.ok()) backends.push_back(std::move(cuda).value());
  return backends;
}

template <typename T>
DeviceBuffer Upload(KernelBackend& backend, const std::vector<T>& host,
                    MemoryKind kind = MemoryKind::kDevice) {
  auto buffer = DeviceBuffer::Create(backend, kind, std::max<size_t>(1, host.size() * sizeof(T)));
  EXPECT_TRUE(buffer.ok()) << buffer.status().ToString();
  if (!host.empty()) {
    EXPECT_TRUE(backend.Copy(buffer->data(), host.data(), host.size() * sizeof(T)).ok());
  }
  return std::move(buffer).value();
}

template <typename T>
std::vector<T> Download(KernelBackend& backend, const DeviceBuffer& buffer, size_t count) {
  std::vector<T> host(count);
  EXPECT_TRUE(backend.Copy(host.data(), buffer.data(), count * sizeof(T)).ok());
  return host;
}

inline std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(n);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(n);
  for (auto& v : values) v = dist(rng);
  return values;
}

}  // namespace kvtier::gpu::testing
