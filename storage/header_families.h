// HeaderFamilies: the disk tier's RocksDB database, with one column family per block
// layout. Internal to DiskTier (storage/disk_tier_impl.h); not part of the storage API.
//
// Layout on disk: the family "layout:<format tag>" (the tag escaped: bytes other than
// letters, digits and `._-/|=+` as %XX) holds the headers of that layout's blocks, keyed
// by the block key's 16 bytes (big-endian hi, lo); the value is the encoded header and its
// payload's location. A layout's headers are thus kept, compacted and listed apart from
// every other layout's, and a block can only ever be looked up under its own layout.
// The "default" family is open (RocksDB requires it) and unused.
//
// Older layouts are upgraded at Open: the headers of the single "headers" family (keyed
// by u16 length | tag | key, the older layout) move to their layout's family, with their
// payload locations unchanged; a database of the BlobDB layout ("blocks:<tag>" families
// of payloads) loses its blocks, with a warning (the disk tier is a cache).
//
// Thread safety: none. DiskTier calls every method under its writer mutex (the family
// map changes only there), except `db()`'s own thread-safe RocksDB calls.
// Ownership: owns the database and every family handle; destroys the handles first.
#pragma once

#include <rocksdb/db.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/block_key.h"
#include "storage/disk_tier.h"

namespace kvtier::storage::disk_internal {

class HeaderFamilies {
 public:
  // Opens (creating when missing) the database at `options.path` with every layout
  // family on disk, upgrading older layouts (above).
  [[nodiscard]] static Result<std::unique_ptr<HeaderFamilies>> Open(const DiskTierOptions& options);
  ~HeaderFamilies();
  HeaderFamilies(const HeaderFamilies&) = delete;
  HeaderFamilies& operator=(const HeaderFamilies&) = delete;

  rocksdb::DB& db() { return *db_; }

  // The family of `format_tag`'s headers, or nullptr when the tier never stored one.
  rocksdb::ColumnFamilyHandle* Find(std::string_view format_tag) const;
  // As Find, creating the family on first use (a write of RocksDB's MANIFEST).
  [[nodiscard]] Result<rocksdb::ColumnFamilyHandle*> FindOrCreate(std::string_view format_tag);
  // Every layout family, in tag order.
  void ForEach(const std::function<void(std::string_view format_tag, rocksdb::ColumnFamilyHandle*)>&
                   fn) const;
  // Writes every family's memtable out.
  [[nodiscard]] Status Flush();

 private:
  HeaderFamilies(const DiskTierOptions& options, std::unique_ptr<rocksdb::DB> db);
  [[nodiscard]] Status UpgradeSingleFamily(rocksdb::ColumnFamilyHandle* old_headers);

  const rocksdb::ColumnFamilyOptions family_options_;
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::ColumnFamilyHandle* default_family_ = nullptr;
  std::map<std::string, rocksdb::ColumnFamilyHandle*, std::less<>> layouts_;
};

// "layout:" + the tag, escaped (above); and back (nullopt for any other family's name).
std::string LayoutFamilyName(std::string_view format_tag);
std::optional<std::string> FormatTagOfFamily(std::string_view family_name);
// A header's key inside its layout's family.
std::string HeaderKey(const BlockKey& key);

}  // namespace kvtier::storage::disk_internal
