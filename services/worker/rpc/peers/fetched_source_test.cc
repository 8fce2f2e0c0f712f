// FetchedSource under a worker's Onboard: blocks landed in the sequence's own pool blocks
// are taken in place; blocks landed elsewhere (the sequence changed during the fetch) or
// buffered are copied where Onboard wants them.
#include "services/worker/rpc/peers/fetched_source.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "services/worker/testing/worker_testing.h"

namespace kvtier::worker {
namespace {

using testing::Key;
using testing::kRoot;
using testing::Pattern;
using testing::TestLayout;
using testing::Tokens;

constexpr size_t kBlockBytes = 512;  // TestLayout's

// The parameter: the pool the fetch lands in (testing::LandingPool).
class FetchedSourceTest : public ::testing::TestWithParam<testing::LandingPool> {
 protected:
  bool device() const { return GetParam() != testing::LandingPool::kHost; }
  // Sequence `sequence` of client 1 over blocks 1, 2 (8 tokens, nothing reused).
  std::vector<BlockId> Allocate(SequenceId sequence) {
    auto a = worker_->Allocate({.client = 1,
                                .sequence = sequence,
                                .root = kRoot,
                                .block_keys = keys_,
                                .tokens = Tokens(0, 8)});
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? a->block_table : std::vector<BlockId>{};
  }
  // The bytes of pool block `block`.
  std::vector<uint8_t> Read(BlockId block) const {
    std::vector<uint8_t> bytes(kBlockBytes);
    EXPECT_TRUE(worker_->bytes().Read(0, block, bytes).ok());
    return bytes;
  }
  // Onboards sequence 1's blocks 1, 2 from `fetched` (landed in `landing` where given).
  OnboardResult OnboardFrom(const FetchedBlocks& fetched, const LandingBlocks* landing) {
    FetchedSource source(fetched, landing);
    auto onboarded = worker_->Onboard(1, 1, keys_, {}, &source);
    EXPECT_TRUE(onboarded.ok()) << onboarded.status();
    return onboarded.ok() ? *onboarded : OnboardResult{};
  }
  // Pool blocks `table` hold the fetched blocks 1 and 2.
  void ExpectFetchedIn(const std::vector<BlockId>& table) const {
    EXPECT_EQ(Read(table[0]), Pattern(1));
    EXPECT_EQ(Read(table[1]), Pattern(2));
  }
  // Sequence 1's blank blocks held for a fetch, and blocks 1 and 2 written as the fetch
  // writes them (through a host pool's views or a device pool's staging; a buffered one
  // writes its buffer) and, with `land`, landed as its land does.
  Result<LandingBlocks> HoldAndWrite(bool land) const {
    KVTIER_ASSIGN_OR_RETURN(LandingBlocks landing, worker_->held().HoldLanding(1, 1, 2));
    const std::vector<uint8_t> one = Pattern(1), two = Pattern(2);
    if (GetParam() == testing::LandingPool::kDeviceBuffered) {
      if (land) {
        KVTIER_RETURN_IF_ERROR(worker_->held().Land(
            0, landing.blocks, std::vector<std::span<const uint8_t>>{one, two}));
      }
      return landing;
    }
    std::copy(one.begin(), one.end(), landing.views[0].begin());
    std::copy(two.begin(), two.end(), landing.views[1].begin());
    if (land && landing.staged) KVTIER_RETURN_IF_ERROR(landing.staged->Commit(2));
    return landing;
  }
  // What the fetch answers: blocks 1 and 2, in its buffer where it buffered them, landed
  // (a device pool's) as `landed` says.
  FetchedBlocks Fetched(bool landed) const {
    FetchedBlocks fetched{.keys = keys_, .bytes = {}, .block_bytes = kBlockBytes, .landed = landed};
    if (GetParam() == testing::LandingPool::kDeviceBuffered) {
      for (uint8_t seed : {1, 2}) {
        const std::vector<uint8_t> bytes = Pattern(seed);
        fetched.bytes.insert(fetched.bytes.end(), bytes.begin(), bytes.end());
      }
    }
    return fetched;
  }

  std::unique_ptr<Worker> worker_ =
      Worker::Create(
          {.pools = {{TestLayout(), 4}}, .pool_storage = testing::StorageFor(GetParam())})
          .value();
  const std::vector<BlockKey> keys_ = {Key(1), Key(2)};
};

// Blocks 1 and 2 landed in the sequence's own blocks: Onboard takes both in place (on a
// device pool, it scatters nothing).
TEST_P(FetchedSourceTest, BlocksLandedInTheSequencesBlocksAreTakenInPlace) {
  const std::vector<BlockId> table = Allocate(1);
  const Result<LandingBlocks> landing = HoldAndWrite(/*land=*/true);
  ASSERT_TRUE(landing.ok()) << landing.status();
  EXPECT_EQ(OnboardFrom(Fetched(/*landed=*/device()), &*landing).from_remote, 2u);
  EXPECT_EQ(worker_->Stats().landed_in_place, 2u);
  ExpectFetchedIn(table);
  EXPECT_TRUE(worker_->held().Release(0, landing->blocks).ok());
}

// Sequence 1 is freed and allocated again once its fetch has landed: the landing's blocks
// are held, so the new sequence gets the pool's other two, and Onboard copies the landed
// bytes into them.
TEST_P(FetchedSourceTest, BlocksLandedWhereTheSequenceNoLongerIsAreCopiedToIt) {
  Allocate(1);
  const Result<LandingBlocks> landing = HoldAndWrite(/*land=*/true);
  ASSERT_TRUE(landing.ok()) << landing.status();
  ASSERT_TRUE(worker_->Free(1, 1).ok());
  const std::vector<BlockId> again = Allocate(1);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_NE(again[0], landing->blocks[0]);
  EXPECT_NE(again[1], landing->blocks[1]);
  EXPECT_EQ(OnboardFrom(Fetched(/*landed=*/device()), &*landing).from_remote, 2u);
  EXPECT_EQ(worker_->Stats().landed_in_place, 0u);
  ExpectFetchedIn(again);
  EXPECT_TRUE(worker_->held().Release(0, landing->blocks).ok());
}

// A buffered fetch that brought block 1 alone: block 1 is copied, and onboarding stops at
// block 2.
TEST_P(FetchedSourceTest, BufferedBlocksAreCopiedUntilTheFirstMissing) {
  const std::vector<BlockId> table = Allocate(1);
  FetchedBlocks buffered{.keys = {Key(1)}, .bytes = {}, .block_bytes = kBlockBytes};
  const std::vector<uint8_t> bytes = Pattern(9);
  buffered.bytes.assign(bytes.begin(), bytes.end());
  const OnboardResult onboarded = OnboardFrom(buffered, nullptr);
  EXPECT_EQ(onboarded.from_remote, 1u);
  EXPECT_EQ(onboarded.cached_blocks, 1u);
  EXPECT_EQ(Read(table[0]), Pattern(9));
  EXPECT_EQ(worker_->Stats().landed_in_place, 0u);
}

// A device pool's fetch whose landing failed (FetchedBlocks::landed false): its blocks are
// not in the held blocks, so Onboard copies them from where the fetch wrote them (the
// copier's staging, or the fetch's buffer).
TEST_P(FetchedSourceTest, ADevicePoolsRunThatDidNotLandIsCopiedFromWhereItWasWritten) {
  if (!device())
    GTEST_SKIP() << "a host pool's fetch writes its views: there is no landing to fail";
  const std::vector<BlockId> table = Allocate(1);
  const Result<LandingBlocks> landing = HoldAndWrite(/*land=*/false);
  ASSERT_TRUE(landing.ok()) << landing.status();
  EXPECT_EQ(landing->staged != nullptr, GetParam() == testing::LandingPool::kDeviceStaged);
  EXPECT_EQ(OnboardFrom(Fetched(/*landed=*/false), &*landing).from_remote, 2u);
  EXPECT_EQ(worker_->Stats().landed_in_place, 0u);
  ExpectFetchedIn(table);
  EXPECT_TRUE(worker_->held().Release(0, landing->blocks).ok());
}

INSTANTIATE_TEST_SUITE_P(HostAndDeviceOnCpu, FetchedSourceTest,
                         ::testing::ValuesIn(testing::kLandingPools),
                         [](const auto& info) { return testing::NameOf(info.param); });

}  // namespace
}  // namespace kvtier::worker
