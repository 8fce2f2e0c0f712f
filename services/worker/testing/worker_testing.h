// Test helpers shared by the worker's tests: a small layout, chain keys, token runs, block
// patterns, a tier in a map, and pools on the device path without a GPU.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <numeric>
#include <vector>

#include "common/block_key.h"
#include "common/kv_layout.h"
#include "gpu/kernels.h"
#include "services/worker/pool_storage.h"
#include "services/worker/worker.h"

namespace kvtier::worker::testing {

// 2 layers x 2 KV heads x 8 dims x 4 tokens x fp16 x K,V = 512 bytes per block.
inline KvLayout TestLayout() {
  return KvLayout::Create({.num_layers = 2,
                           .num_kv_heads = 2,
                           .head_dim = 8,
                           .tokens_per_block = 4,
                           .dtype = KvDtype::kFp16})
      .value();
}

inline constexpr BlockKey kRoot{3, 3};
inline BlockKey Key(uint64_t n) { return BlockKey{0x2000 + n, n}; }

// Tokens first .. first + count - 1.
inline std::vector<uint32_t> Tokens(uint32_t first, uint32_t count) {
  std::vector<uint32_t> t(count);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// One TestLayout block of bytes, a pattern of its own for each seed.
inline std::vector<uint8_t> Pattern(uint8_t seed) {
  std::vector<uint8_t> bytes(512);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 13 + seed);
  return bytes;
}

// The host tier in one map: what a device pool offloads through its staging block comes
// back on onboard.
class MapTier final : public OffloadTarget, public OnboardSource {
 public:
  Status Offload(const OffloadBlock& block) override {
    blocks[block.key] = std::vector<uint8_t>(block.bytes.begin(), block.bytes.end());
    return Status::Ok();
  }
  Result<SourceTier> Fetch(const OnboardBlock& block) override {
    const auto it = blocks.find(block.key);
    if (it == blocks.end()) return NotFoundError("not here");
    std::copy(it->second.begin(), it->second.end(), block.out.begin());
    return SourceTier::kHost;
  }
  void Landed(std::span<const OnboardBlock> onboarded, std::span<const SourceTier> tiers) override {
    for (size_t i = 0; i < onboarded.size(); ++i) landed.emplace_back(onboarded[i].key, tiers[i]);
  }
  std::map<BlockKey, std::vector<uint8_t>> blocks;
  std::vector<std::pair<BlockKey, SourceTier>> landed;  // what Onboard reported landed, in order
};

// Pools on a GPU pool's code path (staging, gathers, scatters, copiers) run by the CPU
// reference kernels: WorkerOptions::pool_storage for a device pool on any machine.
inline PoolStorageFactory DevicePathOnCpu(
    size_t copier_staging_bytes = BackendPoolOptions{}.copier_staging_bytes,
    uint32_t max_staged_landings = BackendPoolOptions{}.max_staged_landings,
    uint32_t max_staged_reads = BackendPoolOptions{}.max_staged_reads) {
  return [copier_staging_bytes, max_staged_landings, max_staged_reads](size_t bytes) {
    return MakeBackendPoolStorage(
        {.make_backend =
             [] { return Result<std::unique_ptr<gpu::KernelBackend>>(gpu::MakeCpuBackend()); },
         .bytes = bytes,
         .copier_staging_bytes = copier_staging_bytes,
         .max_staged_landings = max_staged_landings,
         .max_staged_reads = max_staged_reads});
  };
}

// The pools a landing test runs on: host memory (a fetch writes the blocks in place); a
// device pool's code on the CPU kernels whose copiers stage the landing (a fetch writes
// the staging, then commits it); one whose copiers stage a single TestLayout block, too
// few (a fetch buffers its run, then lands it by Worker::HeldBlocks::Land).
enum class LandingPool { kHost, kDeviceStaged, kDeviceBuffered };
inline constexpr std::array<LandingPool, 3> kLandingPools = {
    LandingPool::kHost, LandingPool::kDeviceStaged, LandingPool::kDeviceBuffered};

inline PoolStorageFactory StorageFor(LandingPool pool) {
  switch (pool) {
    case LandingPool::kHost: return nullptr;
    case LandingPool::kDeviceStaged: return DevicePathOnCpu();
    case LandingPool::kDeviceBuffered: return DevicePathOnCpu(/*copier_staging_bytes=*/512);
  }
  return nullptr;
}

// For INSTANTIATE_TEST_SUITE_P's names.
inline const char* NameOf(LandingPool pool) {
  switch (pool) {
    case LandingPool::kHost: return "HostPool";
    case LandingPool::kDeviceStaged: return "DevicePoolStaged";
    case LandingPool::kDeviceBuffered: return "DevicePoolBuffered";
  }
  return "Unknown";
}

}  // namespace kvtier::worker::testing
