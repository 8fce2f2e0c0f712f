#include "storage/stored_header.h"

#include <gtest/gtest.h>

#include <vector>

#include "storage/testing/blocks.h"

namespace kvtier::storage {
namespace {

std::span<const uint8_t> Bytes(const std::string& value) {
  return {reinterpret_cast<const uint8_t*>(value.data()), value.size()};
}

TEST(StoredHeaderTest, AHeaderAndItsLocationComeBackAsStored) {
  const BlockHeader header = testing::MakeBlock(7, 4096).header;
  const std::string value = EncodeStoredHeader(header, 0x0102030405060708ull);
  const Result<StoredHeader> stored = DecodeStoredHeader(Bytes(value), 1 << 20);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->location, 0x0102030405060708ull);
  EXPECT_EQ(stored->header.key, header.key);
  EXPECT_EQ(stored->header.format_tag, header.format_tag);
  EXPECT_EQ(stored->header.payload_bytes, header.payload_bytes);
  EXPECT_EQ(stored->header.checksum, header.checksum);
  EXPECT_EQ(EncodeStoredHeader(stored->header, stored->location), value) << "the same bytes again";
}

TEST(StoredHeaderTest, AValueWithoutAWholeLocationIsDataLoss) {
  const std::string value = EncodeStoredHeader(testing::MakeBlock(7, 4096).header, 42);
  for (const std::string& cut : {value.substr(0, value.size() - 1), value + "x"}) {
    const Result<StoredHeader> stored = DecodeStoredHeader(Bytes(cut), 1 << 20);
    ASSERT_FALSE(stored.ok());
    EXPECT_EQ(stored.status().code(), StatusCode::kDataLoss) << stored.status();
    EXPECT_NE(stored.status().message().find("location"), std::string::npos) << stored.status();
  }
}

TEST(StoredHeaderTest, AHeaderOverTheBlockLimitIsRefused) {
  const std::string value = EncodeStoredHeader(testing::MakeBlock(7, 8192).header, 42);
  EXPECT_FALSE(DecodeStoredHeader(Bytes(value), 4096).ok());
  EXPECT_FALSE(DecodeStoredHeader({}, 4096).ok());
}

}  // namespace
}  // namespace kvtier::storage
