// LentReplies: parked replies are released in order by the reader's count of replies
// read, across the count's wrap at 2^31, and never ahead of it; UnpinAllLent empties it.
#include "services/store/stream/lent_replies.h"

#include <gtest/gtest.h>

#include "services/store/stream/protocol.h"
#include "storage/testing/blocks.h"
#include "storage/testing/tiered_stores.h"

namespace kvtier::store {
namespace {

std::vector<storage::PinnedBlock> NoPins() { return std::vector<storage::PinnedBlock>(2); }

TEST(LentRepliesTest, AnAckReleasesTheRepliesReadAndNoneAfter) {
  LentReplies lent;
  for (uint32_t number : {5u, 6u, 7u}) {
    auto pins = NoPins();
    lent.Park(number, pins);
    EXPECT_TRUE(pins.empty()) << "parked pins are taken";
  }
  lent.Release(4);
  EXPECT_EQ(lent.size(), 3u) << "an older count releases nothing";
  lent.Release(6);
  EXPECT_EQ(lent.size(), 1u) << "5 and 6 read, 7 not yet";
  lent.Release(7);
  EXPECT_TRUE(lent.empty());
}

TEST(LentRepliesTest, TheCountWrapsAt2To31) {
  LentReplies lent;
  for (uint32_t number : {kStreamAckedMask - 1, kStreamAckedMask, 0u, 1u}) {
    auto pins = NoPins();
    lent.Park(number, pins);
  }
  EXPECT_TRUE(lent.full());
  lent.Release(kStreamAckedMask);
  EXPECT_EQ(lent.size(), 2u);
  lent.Release(0);
  EXPECT_EQ(lent.size(), 1u);
  lent.Release(1);
  EXPECT_TRUE(lent.empty());
}

TEST(LentRepliesTest, UnpinningAllLentMakesTheTierReplaceThePagesBeforeReuse) {
  storage::HostTierOptions options;
  options.capacity_bytes = 1u << 20;
  options.try_huge_pages = false;
  auto tier = storage::HostTier::Create(std::move(options)).value();
  const storage::testing::TestBlock block = storage::testing::MakeBlock(1, 1u << 20);
  ASSERT_TRUE(tier->Put(block.header, block.payload).ok());
  if (!tier->can_lend_pages()) GTEST_SKIP() << "this tier's memory cannot be lent";
  std::vector<storage::PinnedBlock> pins;
  pins.push_back(tier->Pin(block.ref()).value());
  LentReplies lent;
  lent.Park(1, pins);
  lent.UnpinAllLent();
  EXPECT_TRUE(lent.empty());
  ASSERT_TRUE(tier->Remove(block.ref()).ok());
  const storage::testing::TestBlock next = storage::testing::MakeBlock(2, 1u << 20);
  ASSERT_TRUE(tier->Put(next.header, next.payload).ok());
  EXPECT_GT(tier->Stats().lent_pages_replaced, 0u) << "lent pages get fresh memory";
}

}  // namespace
}  // namespace kvtier::store
