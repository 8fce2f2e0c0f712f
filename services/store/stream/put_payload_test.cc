#include "services/store/stream/put_payload.h"

#include <gtest/gtest.h>

#include <vector>

#include "storage/host_tier.h"
#include "storage/testing/blocks.h"

namespace kvtier::store {
namespace {

using storage::testing::MakeBlock;
using storage::testing::TestBlock;

TEST(PutPayloadTest, StagedBytesAreCutIntoTheBatchsBlocksInOrder) {
  const TestBlock a = MakeBlock(1, 100), b = MakeBlock(2, 60);
  std::vector<uint8_t> staged(a.payload.begin(), a.payload.end());
  staged.insert(staged.end(), b.payload.begin(), b.payload.end());
  const std::vector<storage::BlockHeader> headers = {a.header, b.header};
  Result<std::vector<storage::PutItem>> items = StagedPutItems(headers, staged, 1 << 20);
  ASSERT_TRUE(items.ok()) << items.status();
  ASSERT_EQ(items->size(), 2u);
  EXPECT_EQ(std::vector<uint8_t>((*items)[1].payload.begin(), (*items)[1].payload.end()),
            b.payload);
  EXPECT_TRUE((*items)[0].checksum_checked);
  EXPECT_EQ((*items)[1].header.key, b.header.key);
}

TEST(PutPayloadTest, ABadBlockRefusesTheBatchNamingIt) {
  const TestBlock a = MakeBlock(1, 100), b = MakeBlock(2, 60);
  std::vector<uint8_t> staged(a.payload.begin(), a.payload.end());
  staged.insert(staged.end(), b.payload.begin(), b.payload.end());
  staged.back() ^= 1;  // block 1's last byte
  const std::vector<storage::BlockHeader> headers = {a.header, b.header};
  const Status refused = StagedPutItems(headers, staged, 1 << 20).status();
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("block 1"), std::string::npos) << refused;
  EXPECT_NE(StagedPutItems(headers, staged, 64).status().message().find("block 0"),
            std::string::npos)
      << "larger than the limit";
}

TEST(PutPayloadTest, TheOutcomeNamesTheCauseNotTheBlocksAbortedWithIt) {
  EXPECT_TRUE(PutOutcome(std::vector<Status>{Status::Ok(), Status::Ok()}).ok());
  const Status cause = PutOutcome(std::vector<Status>{
      AbortedError("with the batch"), ResourceExhaustedError("disk full"), Status::Ok()});
  EXPECT_EQ(cause.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(cause.message().find("block 1"), std::string::npos) << cause;
  const Status only_aborted = PutOutcome(std::vector<Status>{Status::Ok(), AbortedError("x")});
  EXPECT_EQ(only_aborted.code(), StatusCode::kAborted);
  EXPECT_NE(only_aborted.message().find("block 1"), std::string::npos) << only_aborted;
}

TEST(PutPayloadTest, ReservedPiecesCoverEveryBlocksPagesInOrder) {
  storage::HostTierOptions options;
  options.capacity_bytes = 64 << 10;
  options.page_bytes = 4096;
  options.try_huge_pages = false;
  auto host = storage::HostTier::Create(options).value();
  const TestBlock a = MakeBlock(1, 5000), b = MakeBlock(2, 100);
  Result<storage::HostReservation> reserved =
      host->Reserve(std::vector<storage::BlockHeader>{a.header, b.header});
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  std::vector<asio::mutable_buffer> pieces = {asio::mutable_buffer()};  // cleared first
  ReservedPieces(*reserved, pieces);
  size_t bytes = 0;
  for (const asio::mutable_buffer& piece : pieces) bytes += piece.size();
  EXPECT_EQ(bytes, 5100u);
  EXPECT_GE(pieces.size(), 2u);
}

}  // namespace
}  // namespace kvtier::store
