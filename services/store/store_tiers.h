// A node's tiers from its configuration: a host tier of store.host_cache_bytes and a
// RocksDB disk tier of store.disk_bytes under data_dir/blocks (store.disk_sync), demoting
// blocks of priority at least worker.secondary_offload_min_priority, and the disk's
// admission (store.disk_admission). What `kvtier up`'s embedded store and the `kvtier
// store` node both open.
//
// Thread safety: pure functions.
#pragma once

#include <memory>

#include "common/config.h"
#include "storage/admission.h"
#include "storage/tiered_store.h"

namespace kvtier::store {

// `page_bytes`: the host tier's page (0: its default). kInvalidArgument for a bad
// store.disk_sync; the caller adds on_event and AddDiskAdmission.
[[nodiscard]] Result<storage::TieredStoreOptions> TieredStoreOptionsFrom(const KvtierConfig& config,
                                                                         uint32_t page_bytes = 0);

// The admission store.disk_admission names, asked by `tiers.admit_to_disk` (which shares
// it); the caller feeds it requests (DiskAdmission::Record). Null, and no admit_to_disk,
// under "all" or without both tiers. `block_bytes`: the blocks' size, to size its sketch
// to the blocks the tiers hold (0: unknown). kInvalidArgument for a bad policy name.
[[nodiscard]] Result<std::shared_ptr<storage::DiskAdmission>> AddDiskAdmission(
    const KvtierConfig& config, uint64_t block_bytes, storage::TieredStoreOptions& tiers);

}  // namespace kvtier::store
