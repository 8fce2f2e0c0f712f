#include "services/store/store_tiers.h"

namespace kvtier::store {

Result<storage::TieredStoreOptions> TieredStoreOptionsFrom(const KvtierConfig& config,
                                                           uint32_t page_bytes) {
  storage::TieredStoreOptions store;
  if (config.store.host_cache_bytes > 0) {
    store.host.emplace();
    store.host->capacity_bytes = config.store.host_cache_bytes;
    if (page_bytes != 0) store.host->page_bytes = page_bytes;
  }
  if (config.store.disk_bytes > 0) {
    store.disk.emplace();
    store.disk->path = config.data_dir + "/blocks";
    store.disk->capacity_bytes = config.store.disk_bytes;
    KVTIER_ASSIGN_OR_RETURN(store.disk->sync, storage::ParseDiskSync(config.store.disk_sync));
  }
  store.demote_min_priority = static_cast<uint8_t>(config.worker.secondary_offload_min_priority);
  if (store.host && store.disk) {
    store.free_ahead_bytes = config.store.host_cache_bytes / 100 * config.store.host_free_percent;
  }
  return store;
}

}  // namespace kvtier::store
