#include "storage/block_header.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "common/retention_limit.h"
#include "storage/testing/blocks.h"

namespace kvtier::storage {
namespace {

using testing::MakeBlock;

TEST(BlockHeaderTest, EncodeDecodeRoundTripsEveryField) {
  auto block = MakeBlock(42, 1000, 80);
  block.header.retention_left_ms = 12345;
  block.header.first_in_chain = true;
  std::string encoded;
  EncodeHeader(block.header, encoded);
  EXPECT_EQ(encoded.size(), EncodedHeaderBytes(block.header));
  encoded += "payload follows";
  size_t consumed = 0;
  auto decoded =
      DecodeHeader({reinterpret_cast<const uint8_t*>(encoded.data()), encoded.size()}, consumed);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(consumed, EncodedHeaderBytes(block.header));
  EXPECT_EQ(decoded->key, block.header.key);
  EXPECT_EQ(decoded->parent, (BlockKey{0x1234, 41}));
  EXPECT_EQ(decoded->format_tag, block.header.format_tag);
  EXPECT_EQ(decoded->salt_scope, 7u);
  EXPECT_EQ(decoded->checksum, block.header.checksum);
  EXPECT_EQ(decoded->payload_bytes, 1000u);
  EXPECT_EQ(decoded->priority, 80);
  EXPECT_EQ(decoded->retention_left_ms, 12345u);
  EXPECT_TRUE(decoded->first_in_chain);
}

TEST(BlockHeaderTest, DecodeRejectsTruncatedAndGarbledHeaders) {
  auto block = MakeBlock(1, 64);
  std::string encoded;
  EncodeHeader(block.header, encoded);
  size_t consumed = 0;
  auto bytes = [](const std::string& s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };

  auto truncated = DecodeHeader(bytes(encoded.substr(0, 30)), consumed);
  EXPECT_EQ(truncated.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos);

  auto missing_tag = DecodeHeader(bytes(encoded.substr(0, encoded.size() - 1)), consumed);
  EXPECT_EQ(missing_tag.status().code(), StatusCode::kDataLoss);

  std::string bad_magic = encoded;
  bad_magic[0] ^= 0x55;
  auto garbled = DecodeHeader(bytes(bad_magic), consumed);
  EXPECT_EQ(garbled.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(garbled.status().message().find("magic"), std::string::npos);
}

TEST(BlockHeaderTest, ValidateBlockNamesWhatIsWrong) {
  auto block = MakeBlock(3, 256);
  EXPECT_TRUE(ValidateBlock(block.header, block.payload, 1024).ok());

  auto truncated = ValidateBlock(block.header, std::span(block.payload).first(200), 1024);
  EXPECT_EQ(truncated.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(truncated.message().find("truncated or oversized"), std::string::npos);

  auto oversized = ValidateBlock(block.header, block.payload, 128);
  EXPECT_NE(oversized.message().find("exceeds the limit"), std::string::npos);

  block.payload[17] ^= 1;
  EXPECT_NE(ValidateBlock(block.header, block.payload, 1024).message().find("checksum"),
            std::string::npos);

  BlockHeader no_tag = block.header;
  no_tag.format_tag = FormatTag();
  EXPECT_NE(ValidateHeader(no_tag, 1024).message().find("format tag is empty"), std::string::npos);

  BlockHeader bad_priority = block.header;
  bad_priority.priority = 101;
  EXPECT_NE(ValidateHeader(bad_priority, 1024).message().find("priority 101"), std::string::npos);

  // A retention of 100 years is kept; one past it (a peer's 2^55 ms once overflowed the
  // tier's nanosecond deadline) is refused before any tier reads it.
  BlockHeader longest = block.header;
  longest.retention_left_ms = kMaxRetentionMs;
  EXPECT_TRUE(ValidateHeader(longest, 1024).ok());
  BlockHeader too_long = block.header;
  too_long.retention_left_ms = uint64_t{1} << 55;
  const Status refused = ValidateHeader(too_long, 1024);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("block retention of 36028797018963968 ms"), std::string::npos)
      << refused;
}

// The checksums that blocks on disk and on the wire carry are XXH3-64's: whichever of
// libxxhash's code paths computes them (storage/fast_xxh3.h dispatches to the CPU's
// widest), they are the hashes of xxHash's reference (the empty input's is the one its
// documentation gives), for lengths on each of its code paths: short, mid, and the long
// vectorised loop with a tail.
TEST(BlockHeaderTest, PayloadChecksumIsXxh3OfThePayload) {
  const std::pair<size_t, uint64_t> known[] = {{0, 0x2d06800538d394c2ull},
                                               {3, 0x6811538b444fc6dcull},
                                               {240, 0xb80284837259eee4ull},
                                               {1000, 0x2ac5b3b66d7cf18full},
                                               {(256u << 10) + 5, 0xe2f6303bdf875f41ull}};
  for (const auto& [size, hash] : known) {
    std::vector<uint8_t> payload(size);
    for (size_t i = 0; i < size; ++i) payload[i] = static_cast<uint8_t>(i * 131 + (i >> 8));
    EXPECT_EQ(PayloadChecksum(payload), hash) << size << " bytes";
  }
}

// A header's format tag is interned as it is decoded, with bounds: a tag over
// kMaxFormatTagBytes is refused before it is interned, and so is a new tag once the
// process holds FormatTag::kMaxFormatTags. Tags already interned still decode.
// Keep it the file's last test: it fills this process's table of tags.
TEST(BlockHeaderTest, DecodingBoundsTheFormatTagsItInterns) {
  const auto bytes = [](const std::string& s) {
    return std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  // The encoded header of `block` with its tag's bytes replaced by `tag` (of any length).
  const auto with_tag = [](BlockHeader header, const std::string& tag) {
    header.format_tag = FormatTag();
    std::string encoded;
    EncodeHeader(header, encoded);  // no tag: the fixed part, its lengths fixed below
    const uint32_t total = static_cast<uint32_t>(encoded.size() + tag.size());
    const auto tag_bytes = static_cast<uint16_t>(tag.size());
    std::memcpy(encoded.data() + 4, &total, sizeof(total));
    std::memcpy(encoded.data() + encoded.size() - 2, &tag_bytes, sizeof(tag_bytes));
    return encoded + tag;
  };
  const BlockHeader header = testing::MakeBlock(1, 64).header;
  size_t consumed = 0;
  const Result<BlockHeader> long_tag =
      DecodeHeader(bytes(with_tag(header, std::string(300, 'x'))), consumed);
  EXPECT_EQ(long_tag.status().code(), StatusCode::kInvalidArgument) << long_tag.status();
  EXPECT_NE(long_tag.status().message().find("300 bytes"), std::string::npos) << long_tag.status();

  const Result<BlockHeader> first =
      DecodeHeader(bytes(with_tag(header, "decoded-before-the-flood")), consumed);
  ASSERT_TRUE(first.ok()) << first.status();
  for (size_t i = 0; FormatTag::Intern("flood-" + std::to_string(i)).ok(); ++i) {
  }
  const Result<BlockHeader> fresh =
      DecodeHeader(bytes(with_tag(header, "decoded-after-the-flood")), consumed);
  EXPECT_EQ(fresh.status().code(), StatusCode::kResourceExhausted) << fresh.status();
  const Result<BlockHeader> again =
      DecodeHeader(bytes(with_tag(header, "decoded-before-the-flood")), consumed);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->format_tag, first->format_tag);
}

}  // namespace
}  // namespace kvtier::storage
