// HostTier::Reserve and Commit: a put written in place (the data stream reads a put's
// payloads from its socket straight into the tier's pages).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "storage/host_tier.h"
#include "storage/testing/blocks.h"
#include "storage/testing/host_tiers.h"

namespace kvtier::storage {
namespace {

using testing::MakeBlock;
using testing::SmallHostTier;
using testing::TestBlock;

constexpr uint32_t kPage = testing::kTestPageBytes;

std::vector<BlockHeader> Headers(const std::vector<TestBlock>& blocks) {
  std::vector<BlockHeader> headers;
  for (const TestBlock& b : blocks) headers.push_back(b.header);
  return headers;
}

// Writes each block's payload into its reserved pages, as a socket read would.
void Fill(const HostReservation& reservation, const std::vector<TestBlock>& blocks) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    size_t at = 0;
    reservation.ForEachPiece(i, [&](std::span<uint8_t> piece) {
      std::copy_n(blocks[i].payload.begin() + static_cast<ptrdiff_t>(at), piece.size(),
                  piece.begin());
      at += piece.size();
    });
    ASSERT_EQ(at, blocks[i].payload.size()) << "block " << i << "'s pieces cover its payload";
  }
}

std::vector<uint8_t> Read(HostTier& tier, const TestBlock& block) {
  std::vector<uint8_t> out(block.payload.size());
  return tier.Get(block.ref(), out).ok() ? out : std::vector<uint8_t>{};
}

// Blocks 1 (two pages and 10 bytes) and 2 (one page) are reserved and filled: no get finds
// them and the tier counts no block until the commit. Then both read back whole, told
// to on_stored as puts are, and counted as puts.
TEST(HostTierReserveTest, ReservedBlocksAreStoredOnlyWhenCommitted) {
  HostTierOptions options = SmallHostTier(8);
  std::vector<BlockKey> stored;
  options.on_stored = [&](const BlockHeader& h) { stored.push_back(h.key); };
  auto tier = HostTier::Create(options).value();
  const std::vector<TestBlock> blocks{MakeBlock(1, 2 * kPage + 10), MakeBlock(2, kPage)};

  Result<HostReservation> reserved = tier->Reserve(Headers(blocks));
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  EXPECT_EQ(reserved->headers().size(), 2u);
  Fill(*reserved, blocks);
  EXPECT_EQ(tier->Peek(blocks[0].ref()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(tier->Stats().blocks, 0u);
  EXPECT_TRUE(stored.empty());

  const std::vector<Status> results = tier->Commit(std::move(*reserved));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
  EXPECT_EQ(Read(*tier, blocks[0]), blocks[0].payload);
  EXPECT_EQ(Read(*tier, blocks[1]), blocks[1].payload);
  EXPECT_EQ(stored, (std::vector<BlockKey>{blocks[0].header.key, blocks[1].header.key}));
  const TierStats stats = tier->Stats();
  EXPECT_EQ(stats.blocks, 2u);
  EXPECT_EQ(stats.puts, 2u);
  EXPECT_EQ(stats.bytes, 4u * kPage);
}

// A tier of 8 pages, half of them reserved: no eviction can take reserved pages, so a
// put of 5 pages finds no room. The reservation is then dropped unfilled: its pages are
// free again and the put fits.
TEST(HostTierReserveTest, AnAbandonedReservationGivesItsPagesBack) {
  auto tier = HostTier::Create(SmallHostTier(8)).value();
  const TestBlock other = MakeBlock(9, 5 * kPage);
  {
    Result<HostReservation> reserved = tier->Reserve(Headers({MakeBlock(1, 4 * kPage)}));
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    EXPECT_EQ(tier->Put(other.header, other.payload).code(), StatusCode::kResourceExhausted);
  }
  EXPECT_TRUE(tier->Put(other.header, other.payload).ok());
  EXPECT_EQ(tier->Stats().blocks, 1u) << "only the put's block; the reserved one was never stored";
}

// Reservations hold at most half the tier (8 pages): 3 pages, then 1 more, fit; a third
// of 1 page does not, until the first is committed (its pages are stored blocks now, no
// longer reserved) and the second abandoned: then 4 fit again.
TEST(HostTierReserveTest, ReservationsHoldAtMostHalfTheTier) {
  auto tier = HostTier::Create(SmallHostTier(8)).value();
  const std::vector<TestBlock> first{MakeBlock(1, 3 * kPage)};
  Result<HostReservation> three = tier->Reserve(Headers(first));
  ASSERT_TRUE(three.ok()) << three.status();
  Result<HostReservation> one = tier->Reserve(Headers({MakeBlock(2, kPage)}));
  ASSERT_TRUE(one.ok()) << one.status();
  const auto past_half = tier->Reserve(Headers({MakeBlock(3, kPage)}));
  EXPECT_EQ(past_half.status().code(), StatusCode::kResourceExhausted) << past_half.status();
  EXPECT_NE(past_half.status().message().find("half"), std::string::npos) << past_half.status();

  Fill(*three, first);
  ASSERT_TRUE(tier->Commit(std::move(*three)).front().ok());
  one = NotFoundError("abandoned");
  EXPECT_TRUE(tier->Reserve(Headers({MakeBlock(4, 4 * kPage)})).ok())
      << "no page reserved any more";
}

// Two writers reserve block 1 at once (neither sees the other's: reserved blocks are in
// no index). The first commit stores it; the second finds it stored, gives its pages back
// and refreshes it: one block, two puts, and both reservations' pages accounted for.
TEST(HostTierReserveTest, TwoReservationsOfOneBlockStoreItOnce) {
  auto tier = HostTier::Create(SmallHostTier(8)).value();
  const std::vector<TestBlock> block{MakeBlock(1, 2 * kPage)};
  Result<HostReservation> first = tier->Reserve(Headers(block));
  Result<HostReservation> second = tier->Reserve(Headers(block));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  Fill(*first, block);
  Fill(*second, block);
  EXPECT_TRUE(tier->Commit(std::move(*first)).front().ok());
  EXPECT_TRUE(tier->Commit(std::move(*second)).front().ok());
  EXPECT_EQ(Read(*tier, block[0]), block[0].payload);
  const TierStats stats = tier->Stats();
  EXPECT_EQ(stats.blocks, 1u);
  EXPECT_EQ(stats.puts, 2u);
  EXPECT_EQ(stats.bytes, 2u * kPage);
  EXPECT_TRUE(tier->Reserve(Headers({MakeBlock(2, 4 * kPage)})).ok()) << "no page left reserved";
  const TestBlock rest = MakeBlock(3, 6 * kPage);
  EXPECT_TRUE(tier->Put(rest.header, rest.payload).ok());
  EXPECT_EQ(tier->Stats().evictions, 0u)
      << "the second copy's pages came back: block 3 fit beside block 1";
}

// Block 2's bytes do not match its header: the commit stores neither block (block 2 is
// the cause, block 1 refused with it) and the pages go back: a put of the whole tier fits.
TEST(HostTierReserveTest, ACommitWithABlockThatFailsItsChecksumStoresNone) {
  auto tier = HostTier::Create(SmallHostTier(4)).value();
  std::vector<TestBlock> blocks{MakeBlock(1, kPage), MakeBlock(2, kPage)};  // half the tier
  Result<HostReservation> reserved = tier->Reserve(Headers(blocks));
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  blocks[1].payload[7] ^= 0x01;  // the bytes that arrive differ from those checksummed
  Fill(*reserved, blocks);

  const std::vector<Status> results = tier->Commit(std::move(*reserved));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].code(), StatusCode::kAborted) << results[0];
  EXPECT_EQ(results[1].code(), StatusCode::kInvalidArgument) << results[1];
  EXPECT_NE(results[1].message().find("checksum"), std::string::npos) << results[1];
  EXPECT_EQ(tier->Stats().blocks, 0u);
  EXPECT_EQ(tier->Stats().puts, 0u);
  const TestBlock whole = MakeBlock(3, 4 * kPage);
  EXPECT_TRUE(tier->Put(whole.header, whole.payload).ok());
}

// What a reservation cannot take: a block stored already or named twice (its put would
// refresh, not write: the caller puts it instead), a header that cannot describe a
// block, and more bytes than the tier. None takes a page or stores anything.
TEST(HostTierReserveTest, ABatchThatIsNotAllNewBlocksIsNotReserved) {
  auto tier = HostTier::Create(SmallHostTier(4)).value();
  const TestBlock one = MakeBlock(1, kPage), two = MakeBlock(2, kPage);
  ASSERT_TRUE(tier->Put(one.header, one.payload).ok());

  const auto stored_already = tier->Reserve(Headers({two, one}));
  EXPECT_EQ(stored_already.status().code(), StatusCode::kFailedPrecondition)
      << stored_already.status();
  EXPECT_NE(stored_already.status().message().find(one.header.key.ToHex()), std::string::npos);
  const auto twice = tier->Reserve(Headers({two, two}));
  EXPECT_EQ(twice.status().code(), StatusCode::kFailedPrecondition) << twice.status();
  BlockHeader unnamed = two.header;
  unnamed.format_tag = FormatTag();
  const auto bad = tier->Reserve(std::vector<BlockHeader>{unnamed});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status();
  EXPECT_NE(bad.status().message().find("block 0"), std::string::npos) << bad.status();
  const auto too_big = tier->Reserve(Headers({MakeBlock(3, 5 * kPage)}));
  EXPECT_EQ(too_big.status().code(), StatusCode::kResourceExhausted) << too_big.status();

  EXPECT_EQ(tier->Stats().blocks, 1u);
  EXPECT_TRUE(tier->Reserve(Headers({MakeBlock(4, 2 * kPage)})).ok()) << "no page was taken";
}

// A full tier of blocks 1 to 4 (1 used last): reserving two pages evicts as a put of two
// pages would, least recently used first (2, then 3), and 1 and 4 stay.
TEST(HostTierReserveTest, ReservingMakesRoomAsAPutDoes) {
  auto tier = HostTier::Create(SmallHostTier(4)).value();
  std::vector<TestBlock> blocks;
  for (uint64_t id = 1; id <= 4; ++id) {
    blocks.push_back(MakeBlock(id, kPage));
    ASSERT_TRUE(tier->Put(blocks.back().header, blocks.back().payload).ok());
  }
  ASSERT_EQ(Read(*tier, blocks[0]), blocks[0].payload);  // block 1 used last

  Result<HostReservation> reserved = tier->Reserve(Headers({MakeBlock(5, 2 * kPage)}));
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  EXPECT_EQ(tier->Stats().evictions, 2u);
  EXPECT_TRUE(tier->Peek(blocks[0].ref()).ok());
  EXPECT_FALSE(tier->Peek(blocks[1].ref()).ok());
  EXPECT_FALSE(tier->Peek(blocks[2].ref()).ok());
  EXPECT_TRUE(tier->Peek(blocks[3].ref()).ok());
}

}  // namespace
}  // namespace kvtier::storage
