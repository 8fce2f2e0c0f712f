// Internals of DiskTier shared by its two source files: opening RocksDB and the key and
// status encodings. Not part of the storage API.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <memory>
#include <string>

#include "storage/disk_tier.h"

namespace kvtier::storage::disk_internal {

inline constexpr char kHeadersFamily[] = "headers";
inline constexpr char kLegacyPayloadPrefix[] = "blocks:";  // + format tag: the BlobDB layout

struct OpenedDb {
  std::unique_ptr<rocksdb::DB> db;
  rocksdb::ColumnFamilyHandle* default_family = nullptr;
  rocksdb::ColumnFamilyHandle* headers = nullptr;
};

// Creates the directory when missing and opens (or creates) the database; column
// families of the BlobDB layout are dropped (see disk_tier.h).
[[nodiscard]] Result<OpenedDb> OpenDb(const DiskTierOptions& options);
// u16 len(tag) | tag | 16 key bytes: one format's headers sort together.
std::string HeaderKey(std::string_view format_tag, const BlockKey& key);

// OK, or the kvtier status for a RocksDB failure, with `what` as context.
[[nodiscard]] Status FromRocks(const rocksdb::Status& status, const std::string& what);

}  // namespace kvtier::storage::disk_internal
