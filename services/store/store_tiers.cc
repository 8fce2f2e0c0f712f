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

Result<std::shared_ptr<storage::DiskAdmission>> AddDiskAdmission(
    const KvtierConfig& config, uint64_t block_bytes, storage::TieredStoreOptions& tiers) {
  KVTIER_ASSIGN_OR_RETURN(const storage::AdmissionPolicy policy,
                          storage::ParseAdmissionPolicy(config.store.disk_admission));
  if (policy == storage::AdmissionPolicy::kAll || !tiers.host || !tiers.disk)
    return std::shared_ptr<storage::DiskAdmission>();
  const uint64_t tier_bytes = config.store.host_cache_bytes + config.store.disk_bytes;
  KVTIER_ASSIGN_OR_RETURN(
      std::unique_ptr<storage::DiskAdmission> made,
      storage::DiskAdmission::Create(
          {.policy = policy,
           .min_count = config.store.disk_admission_min_count,
           .expected_blocks = block_bytes == 0 ? 0 : tier_bytes / block_bytes}));
  std::shared_ptr<storage::DiskAdmission> admission = std::move(made);
  tiers.admit_to_disk = [admission](const storage::BlockHeader& candidate,
                                    std::span<const storage::DisplacedBlock> displaced) {
    return admission->Admit(candidate.key, candidate.priority, displaced);
  };
  return admission;
}

}  // namespace kvtier::store
