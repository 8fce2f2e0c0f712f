#include "services/worker/tier_link.h"

#include <cstdio>

namespace kvtier::worker {

std::string StorageFormatTag(const KvLayout& layout, uint64_t format_tag) {
  char hex[20];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(format_tag));
  return layout.Fingerprint() + "|f" + hex;
}

Status TierLink::Offload(const OffloadBlock& block) {
  storage::BlockHeader header;
  header.key = block.key;
  header.parent = block.parent;
  header.first_in_chain = block.first;
  header.format_tag = StorageFormatTag(*block.layout, block.format_tag);
  header.salt_scope = block.salt_scope;
  header.payload_bytes = block.bytes.size();
  header.checksum = storage::PayloadChecksum(block.bytes);
  header.priority = block.priority;
  // Hashed just now from these bytes: the tier need not hash them again.
  const storage::PutItem item{std::move(header), block.bytes, /*checksum_checked=*/true};
  return std::move(store_->PutBatch({&item, 1}).front());
}

}  // namespace kvtier::worker

namespace kvtier::worker {

Result<SourceTier> TierLink::Fetch(const OnboardBlock& block) {
  const std::string format = StorageFormatTag(*block.layout, block.format_tag);
  Result<storage::TieredHit> hit = store_->Get(storage::BlockRef{block.key, format, block.salt_scope}, block.out);
  if (!hit.ok()) return hit.status();
  if (hit->header.payload_bytes != block.out.size()) {
    // The format tag pins the layout, so this is a corrupt store, not a caller's error.
    return DataLossError("stored block " + block.key.ToHex() + " has " + std::to_string(hit->header.payload_bytes) +
                         " bytes; its layout needs " + std::to_string(block.out.size()));
  }
  return hit->tier == storage::TierKind::kHost ? SourceTier::kHost : SourceTier::kDisk;
}

}  // namespace kvtier::worker
