// Internals of DiskTier shared by its source files: the status mapping of RocksDB's
// errors. Not part of the storage API.
#pragma once

#include <rocksdb/status.h>

#include <string>

#include "common/status.h"

namespace kvtier::storage::disk_internal {

// OK, or the kvtier status for a RocksDB failure, with `what` as context.
[[nodiscard]] Status FromRocks(const rocksdb::Status& status, const std::string& what);

}  // namespace kvtier::storage::disk_internal
