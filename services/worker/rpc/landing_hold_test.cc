// LandingHold on a host pool and a device pool (its code run by the CPU kernels): the
// blocks held for a fetch take its run (through a host pool's views, or by Land, on the
// fetch's thread) and go back to the pool with the last share.
#include "services/rpc/gcc_kj_workaround.h"  // first: before any KJ header
#include "services/worker/rpc/landing_hold.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include <kj/async.h>

#include "services/worker/testing/worker_testing.h"

namespace kvtier::worker {
namespace {

// The parameter: whether the pool is a device pool.
class LandingHoldTest : public ::testing::TestWithParam<bool> {
 protected:
  // Sequence 1 of client 1: three full blank blocks, held for a fetch.
  void SetUp() override {
    auto a = worker_->Allocate(
        {.client = 1, .sequence = 1, .root = testing::kRoot, .block_keys = keys_, .tokens = testing::Tokens(0, 12)});
    ASSERT_TRUE(a.ok()) << a.status();
    table_ = a->block_table;
    auto held = LandingHold::Take(*worker_, 1, 1, 3);
    ASSERT_TRUE(held.ok()) << held.status();
    hold_ = *held;
  }
  // A fetch's answer of blocks 1 to `count` (patterns 1 to `count`) in its buffer.
  static FetchedBlocks Fetched(uint8_t count) {
    FetchedBlocks fetched{.keys = {}, .bytes = {}, .block_bytes = 512};
    for (uint8_t i = 1; i <= count; ++i) {
      fetched.keys.push_back(testing::Key(i));
      const std::vector<uint8_t> bytes = testing::Pattern(i);
      fetched.bytes.insert(fetched.bytes.end(), bytes.begin(), bytes.end());
    }
    return fetched;
  }

  // This thread's loop, for the hold's executor (owned by pointer: its destructor may throw).
  std::unique_ptr<kj::EventLoop> loop_ = std::make_unique<kj::EventLoop>();
  std::unique_ptr<kj::WaitScope> wait_scope_ = std::make_unique<kj::WaitScope>(*loop_);
  std::unique_ptr<Worker> worker_ =
      Worker::Create({.pools = {{testing::TestLayout(), 4}},
                      .pool_storage = GetParam() ? testing::DevicePathOnCpu() : nullptr})
          .value();
  const std::vector<BlockKey> keys_ = {testing::Key(1), testing::Key(2), testing::Key(3)};
  std::vector<BlockId> table_;
  std::shared_ptr<LandingHold> hold_;
};

// The fetch brought blocks 1 and 2 of the three held: another thread lands them in the
// sequence's first two blocks; the third keeps what it had. The last share gives all
// three back.
TEST_P(LandingHoldTest, ARunLandsInTheFirstHeldBlocksFromAnyThread) {
  EXPECT_EQ(hold_->blocks().views.empty(), GetParam()) << "a device pool's blocks have no host view";
  Status landed;
  std::thread fetch([&] { landed = hold_->Land(Fetched(2)); });
  fetch.join();
  ASSERT_TRUE(landed.ok()) << landed;
  std::vector<uint8_t> back(512);
  for (uint8_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(worker_->ReadBlock(0, table_[i], back).ok());
    EXPECT_EQ(back, testing::Pattern(i + 1)) << "block " << int(i + 1);
  }
  ASSERT_TRUE(worker_->ReadBlock(0, table_[2], back).ok());
  EXPECT_EQ(back, std::vector<uint8_t>(512, 0)) << "block 3 not fetched: as it was";
  EXPECT_EQ(worker_->Stats().pools[0].held, 3u);
  hold_.reset();
  EXPECT_EQ(worker_->Stats().pools[0].held, 0u);
}

// More blocks fetched than held, or a buffer that is not the run's bytes: refused, nothing landed.
TEST_P(LandingHoldTest, ARunThatDoesNotFitIsRefused) {
  const Status too_many = hold_->Land(Fetched(4));
  EXPECT_EQ(too_many.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("landing 4 fetched blocks"), std::string::npos) << too_many;
  FetchedBlocks short_bytes = Fetched(2);
  short_bytes.bytes.resize(700);
  EXPECT_EQ(hold_->Land(short_bytes).code(), StatusCode::kInvalidArgument);
  std::vector<uint8_t> back(512);
  ASSERT_TRUE(worker_->ReadBlock(0, table_[0], back).ok());
  EXPECT_EQ(back, std::vector<uint8_t>(512, 0));
}

// A fetch of four blocks directed at the three held: its keys are cut to three, it keeps
// a share of the hold, and it lands through a host pool's views (land_in) or, for a device
// pool, by its land (Land), which puts blocks 1 and 2 in place.
TEST_P(LandingHoldTest, AFetchIsDirectedAtTheHeldBlocks) {
  PeerFetchRequest request{.keys = {testing::Key(1), testing::Key(2), testing::Key(3), testing::Key(4)}};
  LandingHold::Direct(hold_, request);
  EXPECT_EQ(request.keys.size(), 3u);
  EXPECT_EQ(request.keep, hold_);
  if (!GetParam()) {
    ASSERT_EQ(request.land_in.size(), 3u);
    EXPECT_EQ(request.land_in[1].data(), hold_->blocks().views[1].data());
    EXPECT_FALSE(request.land);
    return;
  }
  EXPECT_TRUE(request.land_in.empty());
  ASSERT_TRUE(request.land);
  ASSERT_TRUE(request.land(Fetched(2)).ok());
  std::vector<uint8_t> back(512);
  ASSERT_TRUE(worker_->ReadBlock(0, table_[1], back).ok());
  EXPECT_EQ(back, testing::Pattern(2));
}

INSTANTIATE_TEST_SUITE_P(HostAndDeviceOnCpu, LandingHoldTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "DevicePoolOnCpu" : "HostPool"; });

}  // namespace
}  // namespace kvtier::worker
