#include "storage/stored_header.h"

#include <string_view>
#include <utility>

#include "storage/disk_tier_internal.h"

namespace kvtier::storage {

std::string EncodeStoredHeader(const BlockHeader& header, uint64_t location) {
  std::string value;
  EncodeHeader(header, value);
  disk_internal::AppendBigEndian(value, location);
  return value;
}

Result<StoredHeader> DecodeStoredHeader(std::span<const uint8_t> value, uint64_t max_block_bytes) {
  size_t consumed = 0;
  KVTIER_ASSIGN_OR_RETURN(BlockHeader header, DecodeHeader(value, consumed));
  KVTIER_RETURN_IF_ERROR(ValidateHeader(header, max_block_bytes));
  if (value.size() != consumed + 8) {
    return DataLossError("a block header without its payload's location");
  }
  const std::string_view location(reinterpret_cast<const char*>(value.data()) + consumed, 8);
  return StoredHeader{std::move(header), disk_internal::ReadBigEndian(location)};
}

}  // namespace kvtier::storage
