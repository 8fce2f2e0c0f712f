// Test helpers: a node's tiers as tests build them.
#pragma once

#include <cstdint>
#include <string>

#include "storage/tiered_store.h"

namespace kvtier::storage::testing {

// `host_bytes` of host memory (64 KiB pages), no disk tier.
inline TieredStoreOptions HostOnly(uint64_t host_bytes) {
  TieredStoreOptions tiers;
  tiers.host.emplace();
  tiers.host->capacity_bytes = host_bytes;
  return tiers;
}

// `host_bytes` of host memory (64 KiB pages) over a disk tier of `disk_bytes` in `disk_path`.
inline TieredStoreOptions HostOverDisk(uint64_t host_bytes, const std::string& disk_path,
                                       uint64_t disk_bytes = 64ull << 20) {
  TieredStoreOptions tiers;
  tiers.host.emplace();
  tiers.host->capacity_bytes = host_bytes;
  tiers.disk.emplace();
  tiers.disk->path = disk_path;
  tiers.disk->capacity_bytes = disk_bytes;
  return tiers;
}

}  // namespace kvtier::storage::testing
