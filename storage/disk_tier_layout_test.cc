// The disk tier's RocksDB layout: a column family per block layout, and the upgrades of
// older layouts at open (storage/header_families.h).
#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <algorithm>
#include <map>

#include "storage/disk_tier.h"
#include "storage/header_families.h"
#include "storage/testing/blocks.h"
#include "storage/testing/disk.h"
#include "tests/testing/test_util.h"

namespace kvtier::storage {
namespace {

using disk_internal::HeaderKey;
using disk_internal::LayoutFamilyName;
using kvtier::testing::TempDir;
using testing::MakeBlock;
using testing::OpenDiskTier;
using testing::ReadBack;
using testing::TestBlock;

constexpr char kOtherFormat[] = "other-model|L1/H1/D8/T16/fp16/W0/S0|int8";

std::vector<std::string> Families(const std::string& path) {
  std::vector<std::string> names;
  EXPECT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), path, &names).ok());
  std::sort(names.begin(), names.end());
  return names;
}

void StoreAndClose(const std::string& path, const std::vector<TestBlock>& blocks) {
  auto tier = OpenDiskTier(path);
  ASSERT_NE(tier, nullptr);
  for (const TestBlock& block : blocks) ASSERT_TRUE(tier->Put(block.header, block.payload).ok());
}

// The database at `path` opened raw, every family at hand by name.
class RawDb {
 public:
  explicit RawDb(const std::string& path, std::vector<std::string> extra = {}) {
    rocksdb::Options options;
    options.create_missing_column_families = true;
    std::vector<std::string> names = Families(path);
    names.insert(names.end(), extra.begin(), extra.end());
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    for (const std::string& name : names)
      families.emplace_back(name, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    EXPECT_TRUE(rocksdb::DB::Open(options, path, families, &handles, &db).ok());
    db_.reset(db);
    for (size_t i = 0; i < handles.size(); ++i) handles_[names[i]] = handles[i];
  }
  ~RawDb() {
    for (auto& [name, handle] : handles_) EXPECT_TRUE(db_->DestroyColumnFamilyHandle(handle).ok());
  }
  rocksdb::DB& db() { return *db_; }
  rocksdb::ColumnFamilyHandle* operator[](const std::string& name) { return handles_.at(name); }
  void Drop(const std::string& name) {
    ASSERT_TRUE(db_->DropColumnFamily(handles_.at(name)).ok());
    ASSERT_TRUE(db_->DestroyColumnFamilyHandle(handles_.at(name)).ok());
    handles_.erase(name);
  }

 private:
  std::unique_ptr<rocksdb::DB> db_;
  std::map<std::string, rocksdb::ColumnFamilyHandle*> handles_;
};

TEST(DiskTierLayoutTest, EachLayoutKeepsItsHeadersInAColumnFamilyOfItsOwn) {
  TempDir dir;
  auto a = MakeBlock(1, 4096), b = MakeBlock(2, 4096, 35, 7, kOtherFormat);
  StoreAndClose(dir.path(), {a, b});
  EXPECT_EQ(Families(dir.path()),
            (std::vector<std::string>{"default", LayoutFamilyName(kOtherFormat),
                                      LayoutFamilyName(testing::kFormat)}));
  RawDb raw(dir.path());
  std::string value;
  EXPECT_TRUE(raw.db()
                  .Get({}, raw[LayoutFamilyName(testing::kFormat)], HeaderKey(a.header.key), &value)
                  .ok());
  EXPECT_TRUE(raw.db()
                  .Get({}, raw[LayoutFamilyName(kOtherFormat)], HeaderKey(a.header.key), &value)
                  .IsNotFound())
      << "block 1 is filed under its own layout only";
}

// A header copied into another layout's family (a key that this layout never stored) is
// refused at open: counted, deleted, never served under that layout.
TEST(DiskTierLayoutTest, AHeaderFiledUnderAnotherLayoutIsDroppedAtOpen) {
  TempDir dir;
  auto a = MakeBlock(1, 4096), b = MakeBlock(2, 4096, 35, 7, kOtherFormat);
  StoreAndClose(dir.path(), {a, b});
  {
    RawDb raw(dir.path());
    std::string header_of_a;
    ASSERT_TRUE(
        raw.db()
            .Get({}, raw[LayoutFamilyName(testing::kFormat)], HeaderKey(a.header.key), &header_of_a)
            .ok());
    ASSERT_TRUE(
        raw.db()
            .Put({}, raw[LayoutFamilyName(kOtherFormat)], HeaderKey(a.header.key), header_of_a)
            .ok());
  }
  auto tier = OpenDiskTier(dir.path());
  EXPECT_EQ(tier->Stats().checksum_failures, 1u);
  EXPECT_EQ(tier->Stats().blocks, 2u) << "blocks 1 and 2, each under its own layout";
  EXPECT_EQ(*ReadBack(*tier, a), a.payload);
  EXPECT_EQ(*ReadBack(*tier, b), b.payload);
  TestBlock a_as_other = a;
  a_as_other.header.format_tag = kOtherFormat;
  EXPECT_EQ(ReadBack(*tier, a_as_other).status().code(), StatusCode::kNotFound);
}

// Stop 20's layout kept every header in one "headers" family, keyed u16 len | tag | key.
// Opening such a database moves the headers to their layouts' families; the payloads in
// the segments are not touched, and every block reads back.
TEST(DiskTierLayoutTest, HeadersOfTheSingleFamilyLayoutMoveToTheirLayoutsAtOpen) {
  TempDir dir;
  std::vector<TestBlock> blocks;
  for (uint64_t id = 1; id <= 6; ++id)
    blocks.push_back(MakeBlock(id, 4096, 35, 7, id % 2 ? testing::kFormat : kOtherFormat));
  StoreAndClose(dir.path(), blocks);
  {  // Rewrite the database into the old layout.
    RawDb raw(dir.path(), {"headers"});
    for (const char* format : {testing::kFormat, kOtherFormat}) {
      std::unique_ptr<rocksdb::Iterator> it(
          raw.db().NewIterator({}, raw[LayoutFamilyName(format)]));
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        const std::string tag(format);
        std::string old_key{static_cast<char>(tag.size() >> 8), static_cast<char>(tag.size())};
        old_key += tag + it->key().ToString();
        ASSERT_TRUE(raw.db().Put({}, raw["headers"], old_key, it->value()).ok());
      }
      ASSERT_TRUE(it->status().ok());
      it.reset();
      raw.Drop(LayoutFamilyName(format));
    }
    ASSERT_TRUE(raw.db().Put({}, raw["headers"], "not a key of that layout", "x").ok());
  }
  ASSERT_EQ(Families(dir.path()), (std::vector<std::string>{"default", "headers"}));
  auto tier = OpenDiskTier(dir.path());
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->Stats().blocks, 6u);
  for (const TestBlock& block : blocks)
    EXPECT_EQ(*ReadBack(*tier, block), block.payload) << "block " << block.header.key.lo;
  tier.reset();
  EXPECT_EQ(Families(dir.path()),
            (std::vector<std::string>{"default", LayoutFamilyName(kOtherFormat),
                                      LayoutFamilyName(testing::kFormat)}))
      << "the single family is gone";
  auto reopened = OpenDiskTier(dir.path());
  EXPECT_EQ(reopened->Stats().blocks, 6u) << "and the move was durable";
}

// A database of the BlobDB layout (a "blocks:<format>" column family of payloads, headers
// without locations) is dropped at open: the tier starts empty, serves, and the old
// families are gone.
TEST(DiskTierLayoutTest, ADatabaseOfTheBlobDbLayoutIsDroppedAtOpen) {
  TempDir dir;
  {
    rocksdb::Options options;
    options.create_if_missing = true;
    options.create_missing_column_families = true;
    std::vector<rocksdb::ColumnFamilyDescriptor> families{
        {rocksdb::kDefaultColumnFamilyName, {}}, {"headers", {}}, {"blocks:old-format", {}}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, dir.path(), families, &handles, &db).ok());
    ASSERT_TRUE(db->Put({}, handles[1], "a header", "without a location").ok());
    ASSERT_TRUE(db->Put({}, handles[2], "a key", "a payload").ok());
    for (auto* handle : handles) ASSERT_TRUE(db->DestroyColumnFamilyHandle(handle).ok());
    delete db;
  }
  auto tier = OpenDiskTier(dir.path());
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->Stats().blocks, 0u);
  auto block = MakeBlock(1, 4096);
  ASSERT_TRUE(tier->Put(block.header, block.payload).ok());
  EXPECT_EQ(*ReadBack(*tier, block), block.payload);
  tier.reset();
  std::vector<std::string> names;
  ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), dir.path(), &names).ok());
  EXPECT_EQ(std::count(names.begin(), names.end(), "blocks:old-format"), 0)
      << "the old payload family is gone";
  auto reopened = OpenDiskTier(dir.path());
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(*ReadBack(*reopened, block), block.payload)
      << "what was stored after the upgrade stays";
}

}  // namespace
}  // namespace kvtier::storage
