#include "services/store/stream/reply_gather.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "storage/testing/blocks.h"

namespace kvtier::store {
namespace {

std::vector<uint8_t> Flatten(const ReplyGather& gather) {
  std::vector<uint8_t> out;
  for (const asio::const_buffer& b : gather.buffers()) {
    const auto* p = static_cast<const uint8_t*>(b.data());
    out.insert(out.end(), p, p + b.size());
  }
  return out;
}

StreamReply ReplyOf(const std::vector<uint8_t>& bytes) {
  StreamReply reply;
  std::memcpy(&reply, bytes.data(), sizeof(reply));
  return reply;
}

TEST(ReplyGatherTest, ARefusalCarriesItsCodeAndMessageCut) {
  ReplyGather gather;
  gather.Refusal(ResourceExhaustedError(std::string(5000, 'x')));
  const std::vector<uint8_t> bytes = Flatten(gather);
  const StreamReply reply = ReplyOf(bytes);
  EXPECT_EQ(reply.code, static_cast<uint32_t>(StatusCode::kResourceExhausted));
  EXPECT_EQ(reply.message_bytes, kMaxStreamMessageBytes);
  EXPECT_EQ(bytes.size(), sizeof(StreamReply) + kMaxStreamMessageBytes);
  EXPECT_FALSE(gather.any_lendable());
}

TEST(ReplyGatherTest, AStoredPutIsTheFixedReplyAlone) {
  ReplyGather gather;
  gather.Refusal(InternalError("an earlier reply"));
  gather.Stored(3);
  const std::vector<uint8_t> bytes = Flatten(gather);
  ASSERT_EQ(bytes.size(), sizeof(StreamReply));
  EXPECT_EQ(ReplyOf(bytes).code, 0u);
  EXPECT_EQ(ReplyOf(bytes).blocks, 3u);
}

// A keyed get of three blocks, the second missing: header length, padded states, the
// headers padded to 8 bytes, then the two blocks' bytes; only the pinned piece lendable.
TEST(ReplyGatherTest, AKeyedGetLaysOutStatesHeadersAndBytesInOrder) {
  const storage::testing::TestBlock a = storage::testing::MakeBlock(1, 16);
  const storage::testing::TestBlock c = storage::testing::MakeBlock(3, 8);
  ReplyGather gather;
  gather.BeginGet(3, /*headers=*/true);
  gather.AddPiece(a.payload, /*lendable=*/true);
  gather.AddHeader(a.header);
  gather.SetState(0, StreamBlockState::kPresent);
  gather.SetState(1, StreamBlockState::kMissing);
  gather.AddPiece(c.payload, /*lendable=*/false);
  gather.AddHeader(c.header);
  gather.SetState(2, StreamBlockState::kPresent);
  gather.FinishGet(24);

  const std::vector<uint8_t> bytes = Flatten(gather);
  const StreamReply reply = ReplyOf(bytes);
  EXPECT_EQ(reply.blocks, 3u);
  EXPECT_EQ(reply.payload_bytes, 24u);
  size_t at = sizeof(StreamReply);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data() + at, sizeof(header_bytes));
  at += sizeof(header_bytes);
  std::string encoded;
  storage::EncodeHeader(a.header, encoded);
  storage::EncodeHeader(c.header, encoded);
  EXPECT_EQ(header_bytes, (encoded.size() + 7) / 8 * 8);
  EXPECT_EQ(header_bytes % 8, 0u);
  const std::vector<uint8_t> states(bytes.begin() + static_cast<long>(at),
                                    bytes.begin() + static_cast<long>(at + PaddedStateBytes(3)));
  EXPECT_EQ(states[0], static_cast<uint8_t>(StreamBlockState::kPresent));
  EXPECT_EQ(states[1], static_cast<uint8_t>(StreamBlockState::kMissing));
  EXPECT_EQ(states[2], static_cast<uint8_t>(StreamBlockState::kPresent));
  at += PaddedStateBytes(3);
  EXPECT_EQ(std::memcmp(bytes.data() + at, encoded.data(), encoded.size()), 0);
  at += header_bytes;
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin() + static_cast<long>(at), bytes.end()), [&] {
    std::vector<uint8_t> both(a.payload.begin(), a.payload.end());
    both.insert(both.end(), c.payload.begin(), c.payload.end());
    return both;
  }());
  ASSERT_TRUE(gather.any_lendable());
  const size_t pieces = gather.buffers().size();
  EXPECT_TRUE(gather.lendable(pieces - 2)) << "a's pinned pages";
  EXPECT_FALSE(gather.lendable(pieces - 1));
  EXPECT_FALSE(gather.lendable(0)) << "the fixed reply";
}

}  // namespace
}  // namespace kvtier::store
