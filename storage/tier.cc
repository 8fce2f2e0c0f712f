#include "storage/tier.h"

namespace kvtier::storage {

Status ValidatePut(const BlockHeader& header, std::span<const uint8_t> payload,
                   bool checksum_checked, uint64_t max_payload_bytes) {
  return checksum_checked ? ValidateBlockSize(header, payload, max_payload_bytes)
                          : ValidateBlock(header, payload, max_payload_bytes);
}

std::vector<Status> BlockTier::PutBatch(std::span<const PutItem> items) {
  std::vector<Status> results;
  results.reserve(items.size());
  for (const PutItem& item : items) results.push_back(Put(item.header, item.payload));
  return results;
}

std::vector<Result<BlockHeader>> BlockTier::GetBatch(std::span<const GetItem> items) {
  std::vector<Result<BlockHeader>> results;
  results.reserve(items.size());
  for (const GetItem& item : items) results.push_back(Get(item.ref, item.out));
  return results;
}

}  // namespace kvtier::storage
