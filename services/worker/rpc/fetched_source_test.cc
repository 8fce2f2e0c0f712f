// FetchedSource under a worker's Onboard: blocks landed in the sequence's own pool blocks
// are taken in place; blocks landed elsewhere (the sequence changed during the fetch) or
// buffered are copied where Onboard wants them.
#include "services/worker/rpc/fetched_source.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "services/worker/testing/worker_testing.h"

namespace kvtier::worker {
namespace {

using testing::Key;
using testing::kRoot;
using testing::TestLayout;
using testing::Tokens;

constexpr size_t kBlockBytes = 512;  // TestLayout's

std::vector<uint8_t> Pattern(uint8_t seed) {
  std::vector<uint8_t> bytes(kBlockBytes);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + seed);
  return bytes;
}

class FetchedSourceTest : public ::testing::Test {
 protected:
  // Sequence `sequence` of client 1 over blocks 1, 2 (8 tokens, nothing reused).
  std::vector<BlockId> Allocate(SequenceId sequence) {
    auto a = worker_->Allocate({.client = 1, .sequence = sequence, .root = kRoot, .block_keys = keys_,
                                .tokens = Tokens(0, 8)});
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? a->block_table : std::vector<BlockId>{};
  }
  // The bytes of pool block `block`.
  std::vector<uint8_t> Read(BlockId block) const {
    std::vector<uint8_t> bytes(kBlockBytes);
    EXPECT_TRUE(worker_->ReadBlock(0, block, bytes).ok());
    return bytes;
  }
  // Onboards sequence 1's blocks 1, 2 from `fetched` (landed in `landed` where given).
  OnboardResult OnboardFrom(const FetchedBlocks& fetched, std::span<const std::span<uint8_t>> landed) {
    FetchedSource source(fetched, landed);
    auto onboarded = worker_->Onboard(1, 1, keys_, {}, &source);
    EXPECT_TRUE(onboarded.ok()) << onboarded.status();
    return onboarded.ok() ? *onboarded : OnboardResult{};
  }
  // Pool blocks `table` hold the fetched blocks 1 and 2.
  void ExpectFetchedIn(const std::vector<BlockId>& table) const {
    EXPECT_EQ(Read(table[0]), Pattern(1));
    EXPECT_EQ(Read(table[1]), Pattern(2));
  }
  // Sequence 1's blank blocks held for a fetch, and blocks 1 and 2 written there as the
  // fetch writes them.
  Result<LandingBlocks> HoldAndLand() const {
    KVTIER_ASSIGN_OR_RETURN(LandingBlocks landing, worker_->HoldLanding(1, 1, 2));
    for (size_t i = 0; i < 2; ++i) {
      const std::vector<uint8_t> bytes = Pattern(static_cast<uint8_t>(i + 1));
      std::copy(bytes.begin(), bytes.end(), landing.views[i].begin());
    }
    return landing;
  }

  std::unique_ptr<Worker> worker_ = Worker::Create({.pools = {{TestLayout(), 4}}}).value();
  const std::vector<BlockKey> keys_ = {Key(1), Key(2)};
  const FetchedBlocks landed_ = {.keys = keys_, .bytes = {}, .block_bytes = kBlockBytes};  // no bytes: landed
};

// Blocks 1 and 2 landed in the sequence's own blocks: Onboard takes both in place.
TEST_F(FetchedSourceTest, BlocksLandedInTheSequencesBlocksAreTakenInPlace) {
  const std::vector<BlockId> table = Allocate(1);
  const Result<LandingBlocks> landing = HoldAndLand();
  ASSERT_TRUE(landing.ok()) << landing.status();
  EXPECT_EQ(OnboardFrom(landed_, landing->views).from_remote, 2u);
  EXPECT_EQ(worker_->Stats().landed_in_place, 2u);
  ExpectFetchedIn(table);
  EXPECT_TRUE(worker_->ReleaseBlocks(0, landing->blocks).ok());
}

// Sequence 1 is freed and allocated again once its fetch has landed: the landing's blocks
// are held, so the new sequence gets the pool's other two, and Onboard copies the landed
// bytes into them.
TEST_F(FetchedSourceTest, BlocksLandedWhereTheSequenceNoLongerIsAreCopiedToIt) {
  Allocate(1);
  const Result<LandingBlocks> landing = HoldAndLand();
  ASSERT_TRUE(landing.ok()) << landing.status();
  ASSERT_TRUE(worker_->Free(1, 1).ok());
  const std::vector<BlockId> again = Allocate(1);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_NE(again[0], landing->blocks[0]);
  EXPECT_NE(again[1], landing->blocks[1]);
  EXPECT_EQ(OnboardFrom(landed_, landing->views).from_remote, 2u);
  EXPECT_EQ(worker_->Stats().landed_in_place, 0u);
  ExpectFetchedIn(again);
  EXPECT_TRUE(worker_->ReleaseBlocks(0, landing->blocks).ok());
}

// A buffered fetch that brought block 1 alone: block 1 is copied, and onboarding stops at
// block 2.
TEST_F(FetchedSourceTest, BufferedBlocksAreCopiedUntilTheFirstMissing) {
  const std::vector<BlockId> table = Allocate(1);
  FetchedBlocks buffered{.keys = {Key(1)}, .bytes = {}, .block_bytes = kBlockBytes};
  const std::vector<uint8_t> bytes = Pattern(9);
  buffered.bytes.assign(bytes.begin(), bytes.end());
  const OnboardResult onboarded = OnboardFrom(buffered, {});
  EXPECT_EQ(onboarded.from_remote, 1u);
  EXPECT_EQ(onboarded.cached_blocks, 1u);
  EXPECT_EQ(Read(table[0]), Pattern(9));
  EXPECT_EQ(worker_->Stats().landed_in_place, 0u);
}

}  // namespace
}  // namespace kvtier::worker
