// A node's tiers from its configuration: a host tier of store.host_cache_bytes and a
// RocksDB disk tier of store.disk_bytes under data_dir/blocks (store.disk_sync), demoting
// blocks of priority at least worker.secondary_offload_min_priority. What `kvtier up`'s
// embedded store and the `kvtier store` node both open.
//
// Thread safety: a pure function.
#pragma once

#include "common/config.h"
#include "storage/tiered_store.h"

namespace kvtier::store {

// `page_bytes`: the host tier's page (0: its default). kInvalidArgument for a bad
// store.disk_sync; the caller adds on_event and admit_to_disk.
[[nodiscard]] Result<storage::TieredStoreOptions> TieredStoreOptionsFrom(const KvtierConfig& config,
                                                                         uint32_t page_bytes = 0);

}  // namespace kvtier::store
