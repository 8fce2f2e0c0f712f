// The disk tier's record of a block in RocksDB: the block's header (block_header.h's
// encoding) followed by its payload's location in the payload segments (8 bytes,
// big-endian). Internal to DiskTier; not part of the storage API.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"
#include "storage/block_header.h"

namespace kvtier::storage {

struct StoredHeader {
  BlockHeader header;
  uint64_t location = 0;
};

[[nodiscard]] std::string EncodeStoredHeader(const BlockHeader& header, uint64_t location);

// kDataLoss for a value that is not a whole header and location; a header that does not
// validate (ValidateHeader, blocks up to `max_block_bytes`) is refused with its reason.
[[nodiscard]] Result<StoredHeader> DecodeStoredHeader(std::span<const uint8_t> value,
                                                      uint64_t max_block_bytes);

}  // namespace kvtier::storage
