#include "storage/header_families.h"

#include <gtest/gtest.h>

#include "tests/testing/test_util.h"

namespace kvtier::storage::disk_internal {
namespace {

using kvtier::testing::TempDir;

TEST(HeaderFamiliesTest, FamilyNamesEscapeTheTagAndReadBack) {
  const std::string tag = "L32/H8/D128/T16/bf16/W0/S0|f00000000000000ab";
  EXPECT_EQ(LayoutFamilyName(tag), "layout:" + tag) << "a worker's tag needs no escaping";
  const std::string odd("a \"quoted\"\n%tag\0", 16);
  const std::string name = LayoutFamilyName(odd);
  EXPECT_EQ(name, "layout:a%20%22quoted%22%0A%25tag%00");
  EXPECT_EQ(FormatTagOfFamily(name), odd);
  EXPECT_EQ(FormatTagOfFamily("headers"), std::nullopt) << "not a layout family";
  EXPECT_EQ(FormatTagOfFamily("layout:"), std::nullopt) << "no tag";
  EXPECT_EQ(FormatTagOfFamily("layout:a%2"), std::nullopt) << "cut-short escape";
  EXPECT_EQ(FormatTagOfFamily("layout:a%zz"), std::nullopt) << "not hex";
}

TEST(HeaderFamiliesTest, HeaderKeysAreTheKeysBigEndianBytes) {
  EXPECT_EQ(HeaderKey(BlockKey{0x0102030405060708, 0x090a0b0c0d0e0f10}),
            std::string("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10", 16));
}

TEST(HeaderFamiliesTest, AFamilyMadeOnFirstUseIsThereAfterReopen) {
  TempDir dir;
  DiskTierOptions options;
  options.path = dir.path();
  {
    auto families = HeaderFamilies::Open(options);
    ASSERT_TRUE(families.ok()) << families.status();
    EXPECT_EQ((*families)->Find("model-a"), nullptr) << "a new database has no layout";
    auto made = (*families)->FindOrCreate("model-a");
    ASSERT_TRUE(made.ok()) << made.status();
    EXPECT_EQ(*(*families)->FindOrCreate("model-a"), *made) << "made once";
    ASSERT_TRUE((*families)->db().Put({}, *made, HeaderKey({1, 2}), "header of block 1:2").ok());
    ASSERT_TRUE((*families)->FindOrCreate("model b").ok());
    ASSERT_TRUE((*families)->Flush().ok());
  }
  auto reopened = HeaderFamilies::Open(options);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  std::vector<std::string> tags;
  (*reopened)->ForEach([&](std::string_view tag, auto*) { tags.emplace_back(tag); });
  EXPECT_EQ(tags, (std::vector<std::string>{"model b", "model-a"}));
  std::string value;
  ASSERT_TRUE(
      (*reopened)->db().Get({}, (*reopened)->Find("model-a"), HeaderKey({1, 2}), &value).ok());
  EXPECT_EQ(value, "header of block 1:2");
}

}  // namespace
}  // namespace kvtier::storage::disk_internal
