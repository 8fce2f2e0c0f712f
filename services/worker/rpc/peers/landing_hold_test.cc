// LandingHold on a host pool and a device pool (its code run by the CPU kernels): the
// blocks held for a fetch take its run (through a host pool's views; on a device pool
// through a copier's staging and one scatter, or, for a landing larger than that staging,
// from the fetch's buffer by Land, on the fetch's thread) and go back to the pool with the
// last share.
#include "services/rpc/gcc_kj_workaround.h"  // first: before any KJ header
#include "services/worker/rpc/peers/landing_hold.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include <kj/async.h>

#include "services/worker/testing/worker_testing.h"

namespace kvtier::worker {
namespace {

// The parameter: the pool the blocks are held in (testing::LandingPool).
class LandingHoldTest : public ::testing::TestWithParam<testing::LandingPool> {
 protected:
  // Sequence 1 of client 1: three full blank blocks, held for a fetch.
  void SetUp() override {
    auto a = worker_->Allocate({.client = 1,
                                .sequence = 1,
                                .root = testing::kRoot,
                                .block_keys = keys_,
                                .tokens = testing::Tokens(0, 12)});
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
  std::vector<uint8_t> Read(size_t i) const {
    std::vector<uint8_t> bytes(512);
    EXPECT_TRUE(worker_->bytes().Read(0, table_[i], bytes).ok());
    return bytes;
  }

  // This thread's loop, for the hold's executor (owned by pointer: its destructor may throw).
  std::unique_ptr<kj::EventLoop> loop_ = std::make_unique<kj::EventLoop>();
  std::unique_ptr<kj::WaitScope> wait_scope_ = std::make_unique<kj::WaitScope>(*loop_);
  std::unique_ptr<Worker> worker_ =
      Worker::Create(
          {.pools = {{testing::TestLayout(), 4}}, .pool_storage = testing::StorageFor(GetParam())})
          .value();
  const std::vector<BlockKey> keys_ = {testing::Key(1), testing::Key(2), testing::Key(3)};
  std::vector<BlockId> table_;
  std::shared_ptr<LandingHold> hold_;
};

// The fetch brought blocks 1 and 2 of the three held, in its buffer: another thread lands
// them in the sequence's first two blocks; the third keeps what it had. The last share
// gives all three back.
TEST_P(LandingHoldTest, ARunLandsInTheFirstHeldBlocksFromAnyThread) {
  EXPECT_EQ(hold_->blocks().staged != nullptr, GetParam() == testing::LandingPool::kDeviceStaged);
  Status landed;
  std::thread fetch([&] { landed = hold_->Land(Fetched(2)); });
  fetch.join();
  ASSERT_TRUE(landed.ok()) << landed;
  EXPECT_EQ(Read(0), testing::Pattern(1));
  EXPECT_EQ(Read(1), testing::Pattern(2));
  EXPECT_EQ(Read(2), std::vector<uint8_t>(512, 0)) << "block 3 not fetched: as it was";
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
  EXPECT_EQ(Read(0), std::vector<uint8_t>(512, 0));
}

// A fetch of four blocks directed at the three held: its keys are cut to three and it
// keeps a share of the hold. It writes blocks 1 to 3 where land_in points but takes 1 and
// 2 alone, then calls its land, if any, as a fetch does: a host pool's blocks hold them
// from the write, a device pool's from the land (one scatter of the run from staging, or
// Land from the fetch's buffer).
TEST_P(LandingHoldTest, AFetchIsDirectedAtTheHeldBlocks) {
  PeerFetchRequest request{
      .keys = {testing::Key(1), testing::Key(2), testing::Key(3), testing::Key(4)}};
  LandingHold::Direct(hold_, request);
  EXPECT_EQ(request.keys.size(), 3u);
  EXPECT_EQ(request.keep, hold_);
  EXPECT_EQ(request.land == nullptr, GetParam() == testing::LandingPool::kHost);
  FetchedBlocks fetched = Fetched(2);
  if (GetParam() == testing::LandingPool::kDeviceBuffered) {
    EXPECT_TRUE(request.land_in.empty()) << "the run comes in the fetch's buffer";
  } else {
    ASSERT_EQ(request.land_in.size(), 3u);
    for (uint8_t i = 0; i < 3; ++i) {  // block 3 too, past the run taken: it must not land
      const std::vector<uint8_t> bytes = testing::Pattern(i + 1);
      std::copy(bytes.begin(), bytes.end(), request.land_in[i].begin());
    }
    fetched.bytes.clear();  // written in place, not buffered
    if (GetParam() == testing::LandingPool::kDeviceStaged) {
      EXPECT_EQ(Read(0), std::vector<uint8_t>(512, 0)) << "in staging until the land";
    }
  }
  if (request.land) {
    ASSERT_TRUE(request.land(fetched).ok());
  }
  EXPECT_EQ(Read(0), testing::Pattern(1));
  EXPECT_EQ(Read(1), testing::Pattern(2));
  if (GetParam() != testing::LandingPool::kHost) {
    EXPECT_EQ(Read(2), std::vector<uint8_t>(512, 0)) << "block 3 not taken: not landed";
  }
}

INSTANTIATE_TEST_SUITE_P(HostAndDeviceOnCpu, LandingHoldTest,
                         ::testing::ValuesIn(testing::kLandingPools),
                         [](const auto& info) { return testing::NameOf(info.param); });

}  // namespace
}  // namespace kvtier::worker
