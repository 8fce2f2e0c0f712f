#include "storage/header_families.h"

#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <spdlog/spdlog.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "storage/disk_tier_internal.h"
#include "storage/rocks_logger.h"

namespace kvtier::storage::disk_internal {
namespace {

constexpr std::string_view kLayoutPrefix = "layout:";
constexpr char kSingleHeadersFamily[] = "headers";  // the older layout: every format in one family
constexpr std::string_view kBlobPayloadPrefix = "blocks:";  // the BlobDB layout's payloads
constexpr size_t kUpgradeBatchEntries = 8192;

bool Plain(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         (c != '\0' && std::strchr("._-/|=+", c) != nullptr);
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// A key of the single "headers" family: u16 len(tag) | tag | 16 key bytes.
std::optional<std::pair<std::string, BlockKey>> ParseSingleFamilyKey(std::string_view key) {
  if (key.size() < 2) return std::nullopt;
  const size_t tag_bytes = static_cast<uint8_t>(key[0]) << 8 | static_cast<uint8_t>(key[1]);
  if (key.size() != 2 + tag_bytes + 16 || tag_bytes == 0) return std::nullopt;
  const std::string_view rest = key.substr(2 + tag_bytes);
  return std::pair{std::string(key.substr(2, tag_bytes)),
                   BlockKey{ReadBigEndian(rest.substr(0, 8)), ReadBigEndian(rest.substr(8))}};
}

rocksdb::DBOptions MakeDbOptions(const DiskTierOptions& options) {
  rocksdb::DBOptions db;
  db.create_if_missing = true;
  db.create_missing_column_families = true;
  db.max_background_jobs = 2;
  db.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  db.info_log = std::make_shared<RocksLogger>(db.info_log_level);  // no LOG file to fill up
  db.db_write_buffer_size = options.memtable_bytes;  // all layouts' memtables together
  return db;
}

rocksdb::ColumnFamilyOptions MakeFamilyOptions(const DiskTierOptions& options) {
  rocksdb::ColumnFamilyOptions family;
  family.write_buffer_size = std::min<uint64_t>(options.memtable_bytes, 16ull << 20);
  return family;
}

}  // namespace

std::string LayoutFamilyName(std::string_view format_tag) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string name(kLayoutPrefix);
  for (char c : format_tag) {
    if (Plain(c)) {
      name.push_back(c);
    } else {
      name.push_back('%');
      name.push_back(kHex[static_cast<uint8_t>(c) >> 4]);
      name.push_back(kHex[static_cast<uint8_t>(c) & 15]);
    }
  }
  return name;
}

std::optional<std::string> FormatTagOfFamily(std::string_view family_name) {
  if (!family_name.starts_with(kLayoutPrefix)) return std::nullopt;
  std::string tag;
  for (size_t i = kLayoutPrefix.size(); i < family_name.size(); ++i) {
    if (family_name[i] != '%') {
      tag.push_back(family_name[i]);
      continue;
    }
    if (i + 2 >= family_name.size()) return std::nullopt;
    const int hi = HexValue(family_name[i + 1]);
    const int lo = HexValue(family_name[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    tag.push_back(static_cast<char>(hi << 4 | lo));
    i += 2;
  }
  if (tag.empty()) return std::nullopt;
  return tag;
}

std::string HeaderKey(const BlockKey& key) {
  std::string out;
  out.reserve(16);
  AppendBigEndian(out, key.hi);
  AppendBigEndian(out, key.lo);
  return out;
}

HeaderFamilies::HeaderFamilies(const DiskTierOptions& options, std::unique_ptr<rocksdb::DB> db)
    : family_options_(MakeFamilyOptions(options)), db_(std::move(db)) {}

HeaderFamilies::~HeaderFamilies() {
  for (auto& [tag, handle] : layouts_)
    db_->DestroyColumnFamilyHandle(handle).PermitUncheckedError();
  if (default_family_ != nullptr)
    db_->DestroyColumnFamilyHandle(default_family_).PermitUncheckedError();
}

Result<std::unique_ptr<HeaderFamilies>> HeaderFamilies::Open(const DiskTierOptions& options) {
  if (options.path.empty()) return InvalidArgumentError("disk tier path is empty");
  std::error_code error;
  std::filesystem::create_directories(options.path, error);
  if (error) {
    const std::string message =
        "cannot create disk tier directory " + options.path + ": " + error.message();
    return error == std::errc::permission_denied ? PermissionDeniedError(message)
                                                 : FailedPreconditionError(message);
  }
  const rocksdb::DBOptions db_options = MakeDbOptions(options);
  std::vector<std::string> names;
  if (!rocksdb::DB::ListColumnFamilies(db_options, options.path, &names).ok())
    names = {};  // a new database
  // The default family too: RocksDB preallocates each WAL file to the largest family's
  // write buffer, and its default (64 MiB) took that much of a small disk at open.
  std::vector<rocksdb::ColumnFamilyDescriptor> families{
      {rocksdb::kDefaultColumnFamilyName, MakeFamilyOptions(options)}};
  for (const std::string& name : names) {
    if (name != rocksdb::kDefaultColumnFamilyName)
      families.emplace_back(name, MakeFamilyOptions(options));
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  KVTIER_RETURN_IF_ERROR(
      FromRocks(rocksdb::DB::Open(db_options, options.path, families, &handles, &raw),
                "opening disk tier " + options.path));
  std::unique_ptr<HeaderFamilies> opened(
      new HeaderFamilies(options, std::unique_ptr<rocksdb::DB>(raw)));
  opened->default_family_ = handles[0];
  rocksdb::ColumnFamilyHandle* single_family = nullptr;
  bool blob_layout = false;
  Status status;
  for (size_t i = 1; i < handles.size(); ++i) {
    const std::string& name = families[i].name;
    if (std::optional<std::string> tag = FormatTagOfFamily(name)) {
      opened->layouts_.emplace(std::move(*tag), handles[i]);
      continue;
    }
    if (name == kSingleHeadersFamily) {
      single_family = handles[i];
      continue;
    }
    // A BlobDB layout's payload family, or a family of no layout of ours: dropped.
    blob_layout |= std::string_view(name).starts_with(kBlobPayloadPrefix);
    if (!std::string_view(name).starts_with(kBlobPayloadPrefix)) {
      spdlog::warn("disk tier {}: column family '{}' is not of this version's layout; dropped",
                   options.path, name);
    }
    if (status.ok())
      status = FromRocks(opened->db_->DropColumnFamily(handles[i]), "dropping family " + name);
    opened->db_->DestroyColumnFamilyHandle(handles[i]).PermitUncheckedError();
  }
  if (single_family != nullptr && status.ok()) {
    if (blob_layout) {
      spdlog::warn(
          "disk tier {}: blocks of the BlobDB layout were dropped (payloads now live in segment "
          "files)",
          options.path);
      status = FromRocks(opened->db_->DropColumnFamily(single_family),
                         "dropping the BlobDB layout's headers");
    } else {
      status = opened->UpgradeSingleFamily(single_family);
    }
  }
  if (single_family != nullptr)
    opened->db_->DestroyColumnFamilyHandle(single_family).PermitUncheckedError();
  if (!status.ok()) return status;
  return opened;
}

// Moves every header of the single family into its layout's family (synced, in batches),
// then drops the single family. A crash midway leaves both: the next open moves the rest.
Status HeaderFamilies::UpgradeSingleFamily(rocksdb::ColumnFamilyHandle* old_headers) {
  rocksdb::WriteOptions synced;
  synced.sync = true;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), old_headers));
  rocksdb::WriteBatch batch;
  uint64_t moved = 0, unreadable = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const auto parsed = ParseSingleFamilyKey(std::string_view(it->key().data(), it->key().size()));
    if (!parsed) {
      ++unreadable;
      continue;
    }
    KVTIER_ASSIGN_OR_RETURN(rocksdb::ColumnFamilyHandle * family, FindOrCreate(parsed->first));
    KVTIER_RETURN_IF_ERROR(
        FromRocks(batch.Put(family, HeaderKey(parsed->second), it->value()), "batch"));
    if (++moved % kUpgradeBatchEntries == 0) {
      KVTIER_RETURN_IF_ERROR(
          FromRocks(db_->Write(synced, &batch), "moving headers to their layout's family"));
      batch.Clear();
    }
  }
  KVTIER_RETURN_IF_ERROR(FromRocks(it->status(), "reading the single headers family"));
  it.reset();
  KVTIER_RETURN_IF_ERROR(
      FromRocks(db_->Write(synced, &batch), "moving headers to their layout's family"));
  KVTIER_RETURN_IF_ERROR(
      FromRocks(db_->DropColumnFamily(old_headers), "dropping the single headers family"));
  spdlog::info(
      "disk tier: {} block headers moved to a column family per layout ({} unreadable ones "
      "dropped)",
      moved, unreadable);
  return Status::Ok();
}

rocksdb::ColumnFamilyHandle* HeaderFamilies::Find(std::string_view format_tag) const {
  const auto it = layouts_.find(format_tag);
  return it == layouts_.end() ? nullptr : it->second;
}

Result<rocksdb::ColumnFamilyHandle*> HeaderFamilies::FindOrCreate(std::string_view format_tag) {
  if (rocksdb::ColumnFamilyHandle* found = Find(format_tag)) return found;
  rocksdb::ColumnFamilyHandle* created = nullptr;
  KVTIER_RETURN_IF_ERROR(
      FromRocks(db_->CreateColumnFamily(family_options_, LayoutFamilyName(format_tag), &created),
                "creating the column family of layout " + std::string(format_tag)));
  layouts_.emplace(std::string(format_tag), created);
  return created;
}

void HeaderFamilies::ForEach(const std::function<void(std::string_view format_tag,
                                                      rocksdb::ColumnFamilyHandle*)>& fn) const {
  for (const auto& [tag, handle] : layouts_) fn(tag, handle);
}

Status HeaderFamilies::Flush() {
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  for (const auto& [tag, handle] : layouts_) handles.push_back(handle);
  if (handles.empty()) return Status::Ok();
  return FromRocks(db_->Flush(rocksdb::FlushOptions(), handles),
                   "flushing the disk tier's headers");
}

}  // namespace kvtier::storage::disk_internal
