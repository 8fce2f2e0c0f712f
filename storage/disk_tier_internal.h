// Internals of DiskTier shared by its source files: the status mapping of RocksDB's
// errors and the big-endian integers of its keys and values. Not part of the storage API.
#pragma once

#include <rocksdb/status.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kvtier::storage::disk_internal {

// OK, or the kvtier status for a RocksDB failure, with `what` as context.
[[nodiscard]] Status FromRocks(const rocksdb::Status& status, const std::string& what);

// 8 bytes, most significant first (keys sort by value).
inline void AppendBigEndian(std::string& out, uint64_t value) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(value >> shift));
}
// The value of up to 8 bytes, most significant first.
inline uint64_t ReadBigEndian(std::string_view bytes) {
  uint64_t value = 0;
  for (char c : bytes) value = value << 8 | static_cast<uint8_t>(c);
  return value;
}

}  // namespace kvtier::storage::disk_internal
