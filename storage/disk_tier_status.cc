#include "storage/disk_tier.h"

#include "storage/disk_tier_internal.h"

namespace kvtier::storage {

Result<DiskSync> ParseDiskSync(std::string_view name) {
  if (name == "none") return DiskSync::kNone;
  if (name == "wal") return DiskSync::kWal;
  if (name == "fsync") return DiskSync::kFsync;
  return InvalidArgumentError("disk sync policy '" + std::string(name) +
                              "' is not one of none, wal, fsync");
}

std::string_view DiskSyncName(DiskSync sync) {
  switch (sync) {
    case DiskSync::kNone: return "none";
    case DiskSync::kWal: return "wal";
    case DiskSync::kFsync: return "fsync";
  }
  return "unknown";
}

namespace disk_internal {

Status FromRocks(const rocksdb::Status& status, const std::string& what) {
  if (status.ok()) return Status::Ok();
  std::string message = what + ": " + status.ToString();
  if (status.IsNoSpace()) return ResourceExhaustedError("disk full: " + message);
  if (status.IsCorruption()) return DataLossError(message);
  if (status.IsNotFound()) return NotFoundError(message);
  if (status.IsInvalidArgument()) return InvalidArgumentError(message);
  if (status.ToString().find("Permission denied") != std::string::npos)
    return PermissionDeniedError(message);
  if (status.IsIOError()) return UnavailableError(message);
  return InternalError(message);
}

}  // namespace disk_internal
}  // namespace kvtier::storage
