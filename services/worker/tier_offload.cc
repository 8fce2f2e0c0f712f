#include "services/worker/tier_offload.h"

#include <cstdio>

namespace kvtier::worker {

std::string StorageFormatTag(const KvLayout& layout, uint64_t format_tag) {
  char hex[20];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(format_tag));
  return layout.Fingerprint() + "|f" + hex;
}

Status TierOffloadTarget::Offload(const OffloadBlock& block) {
  storage::BlockHeader header;
  header.key = block.key;
  header.parent = block.parent;
  header.format_tag = StorageFormatTag(*block.layout, block.format_tag);
  header.salt_scope = block.salt_scope;
  header.payload_bytes = block.bytes.size();
  header.checksum = storage::PayloadChecksum(block.bytes);
  header.priority = block.priority;
  return store_->Put(header, block.bytes);
}

}  // namespace kvtier::worker
