#include <filesystem>

#include <spdlog/spdlog.h>

#include "storage/disk_tier_internal.h"

namespace kvtier::storage {

Result<DiskSync> ParseDiskSync(std::string_view name) {
  if (name == "none") return DiskSync::kNone;
  if (name == "wal") return DiskSync::kWal;
  if (name == "fsync") return DiskSync::kFsync;
  return InvalidArgumentError("disk sync policy '" + std::string(name) + "' is not one of none, wal, fsync");
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
namespace {

void AppendBigEndian(std::string& out, uint64_t value) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(value >> shift));
}

rocksdb::ColumnFamilyOptions HeaderFamilyOptions(const DiskTierOptions& options) {
  rocksdb::ColumnFamilyOptions cf;
  cf.write_buffer_size = std::min<uint64_t>(options.memtable_bytes, 16ull << 20);
  return cf;
}

rocksdb::DBOptions MakeDbOptions() {
  rocksdb::DBOptions db;
  db.create_if_missing = true;
  db.create_missing_column_families = true;
  db.max_background_jobs = 2;
  db.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  db.keep_log_file_num = 2;
  return db;
}

}  // namespace

std::string HeaderKey(std::string_view format_tag, const BlockKey& key) {
  std::string out;
  out.reserve(2 + format_tag.size() + 16);
  out.push_back(static_cast<char>(format_tag.size() >> 8));
  out.push_back(static_cast<char>(format_tag.size()));
  out.append(format_tag);
  AppendBigEndian(out, key.hi);
  AppendBigEndian(out, key.lo);
  return out;
}

Status FromRocks(const rocksdb::Status& status, const std::string& what) {
  if (status.ok()) return Status::Ok();
  std::string message = what + ": " + status.ToString();
  if (status.IsNoSpace()) return ResourceExhaustedError("disk full: " + message);
  if (status.IsCorruption()) return DataLossError(message);
  if (status.IsNotFound()) return NotFoundError(message);
  if (status.IsInvalidArgument()) return InvalidArgumentError(message);
  if (status.ToString().find("Permission denied") != std::string::npos) return PermissionDeniedError(message);
  if (status.IsIOError()) return UnavailableError(message);
  return InternalError(message);
}

Result<OpenedDb> OpenDb(const DiskTierOptions& options) {
  if (options.path.empty()) return InvalidArgumentError("disk tier path is empty");
  std::error_code error;
  std::filesystem::create_directories(options.path, error);
  if (error) {
    const std::string message = "cannot create disk tier directory " + options.path + ": " + error.message();
    return error == std::errc::permission_denied ? PermissionDeniedError(message) : FailedPreconditionError(message);
  }
  const rocksdb::DBOptions db_options = MakeDbOptions();
  std::vector<std::string> names;
  if (!rocksdb::DB::ListColumnFamilies(db_options, options.path, &names).ok()) names = {};  // a new database
  std::vector<rocksdb::ColumnFamilyDescriptor> families{
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {kHeadersFamily, HeaderFamilyOptions(options)}};
  for (const std::string& name : names) {
    if (name.rfind(kLegacyPayloadPrefix, 0) == 0) families.emplace_back(name, rocksdb::ColumnFamilyOptions());
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  KVTIER_RETURN_IF_ERROR(
      FromRocks(rocksdb::DB::Open(db_options, options.path, families, &handles, &raw), "opening disk tier " + options.path));
  OpenedDb opened;
  opened.db.reset(raw);
  opened.default_family = handles[0];
  opened.headers = handles[1];
  // Payloads of the BlobDB layout (before payload segments): dropped, with their headers.
  bool legacy = false;
  for (size_t i = 2; i < handles.size(); ++i) {
    legacy = true;
    KVTIER_RETURN_IF_ERROR(FromRocks(opened.db->DropColumnFamily(handles[i]), "dropping " + families[i].name));
    opened.db->DestroyColumnFamilyHandle(handles[i]).PermitUncheckedError();
  }
  if (legacy) {
    spdlog::warn("disk tier {}: blocks of the BlobDB layout were dropped (payloads now live in segment files)",
                 options.path);
    KVTIER_RETURN_IF_ERROR(FromRocks(opened.db->DropColumnFamily(opened.headers), "dropping old headers"));
    opened.db->DestroyColumnFamilyHandle(opened.headers).PermitUncheckedError();
    KVTIER_RETURN_IF_ERROR(FromRocks(
        opened.db->CreateColumnFamily(HeaderFamilyOptions(options), kHeadersFamily, &opened.headers), "headers"));
  }
  return opened;
}

}  // namespace disk_internal
}  // namespace kvtier::storage
