// The host tier's eviction handler runs outside the tier's lock, its victim held: still
// readable and findable, out of the eviction order, its pages pinned until it leaves.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "storage/host_tier.h"
#include "storage/testing/blocks.h"
#include "storage/testing/host_tiers.h"
#include "tests/testing/test_util.h"

namespace kvtier::storage {
namespace {

using kvtier::testing::WaitUntil;
using testing::MakeBlock;
using testing::TestBlock;

using testing::SmallHostTier;

constexpr uint32_t kPage = testing::kTestPageBytes;

std::unique_ptr<HostTier> Create(HostTierOptions options) {
  auto tier = HostTier::Create(std::move(options));
  EXPECT_TRUE(tier.ok()) << tier.status();
  return std::move(tier).value();
}

// Holds the handler's call for block `slow` until released (5 s at most, so that a tier
// that keeps its lock through the handler fails the test instead of hanging it).
struct SlowHandler {
  explicit SlowHandler(uint64_t slow_block) : slow(slow_block) {}

  const uint64_t slow;
  std::atomic<bool> in_call{false}, released{false};
  Mutex mu;
  std::vector<uint64_t> handed KVTIER_GUARDED_BY(mu);  // blocks handed to on_evict
  std::vector<uint64_t> left KVTIER_GUARDED_BY(mu);    // blocks told to on_evicted

  std::vector<uint64_t> Handed() {
    MutexLock lock(mu);
    return handed;
  }
  std::vector<uint64_t> Left() {
    MutexLock lock(mu);
    return left;
  }

  void Install(HostTierOptions& options) {
    options.on_evict = [this](std::span<const EvictedBlockView> victims) {
      for (const EvictedBlockView& victim : victims) {
        if (victim.header->key.lo == slow) {
          in_call = true;
          WaitUntil([&] { return released.load(); });
          in_call = false;
        }
        MutexLock lock(mu);
        handed.push_back(victim.header->key.lo);
      }
    };
    options.on_evicted = [this](const BlockHeader& header) {
      MutexLock lock(mu);
      left.push_back(header.key.lo);
    };
  }
};

// A two-page tier whose blocks 0 and 1 fill it; a put of block 2 (on its own thread)
// evicts block 0, whose handler stays in its call until `handler.released`.
class StalledEvictionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostTierOptions options = SmallHostTier(2);
    handler_.Install(options);
    options.on_removed = [this](const BlockHeader& header) { removed_.push_back(header.key.lo); };
    tier_ = Create(std::move(options));
    ASSERT_TRUE(tier_->Put(b0_.header, b0_.payload).ok());
    ASSERT_TRUE(tier_->Put(b1_.header, b1_.payload).ok());
    evicting_ = std::thread([this] { EXPECT_TRUE(tier_->Put(b2_.header, b2_.payload).ok()); });
    ASSERT_TRUE(WaitUntil([this] { return handler_.in_call.load(); }));
  }
  void TearDown() override { Finish(); }

  // Lets block 0's handler return and waits for the put of block 2.
  void Finish() {
    handler_.released = true;
    if (evicting_.joinable()) evicting_.join();
  }

  SlowHandler handler_{/*slow_block=*/0};
  std::vector<uint64_t> removed_;
  std::unique_ptr<HostTier> tier_;
  const TestBlock b0_ = MakeBlock(0, kPage), b1_ = MakeBlock(1, kPage), b2_ = MakeBlock(2, kPage),
                  b3_ = MakeBlock(3, kPage);
  std::thread evicting_;
};

TEST_F(StalledEvictionTest, AVictimStaysReadableAndTheTierServesWhileItsHandlerRuns) {
  // Meanwhile block 0 is still served, block 1 too, and a put of block 3 evicts block 1
  // (block 0 is no victim twice).
  std::vector<uint8_t> out(kPage);
  ASSERT_TRUE(tier_->Get(b0_.ref(), out).ok());
  EXPECT_EQ(out, b0_.payload);
  ASSERT_TRUE(tier_->Get(b1_.ref(), out).ok());
  ASSERT_TRUE(tier_->Put(b3_.header, b3_.payload).ok());
  EXPECT_TRUE(handler_.in_call.load())
      << "all of that ran while block 0's handler was still in its call";
  EXPECT_TRUE(tier_->Contains(b0_.ref()));
  EXPECT_FALSE(tier_->Contains(b1_.ref()));

  Finish();
  EXPECT_FALSE(tier_->Contains(b0_.ref()));
  EXPECT_TRUE(tier_->Contains(b2_.ref()));
  EXPECT_TRUE(tier_->Contains(b3_.ref()));
  EXPECT_EQ(handler_.Handed(), (std::vector<uint64_t>{1, 0}));
  EXPECT_EQ(handler_.Left(), (std::vector<uint64_t>{1, 0}));
  EXPECT_EQ(tier_->Stats().evictions, 2u);
}

TEST_F(StalledEvictionTest, ARemoveWhileTheHandlerRunsWinsAndFreesThePages) {
  // Block 0, being evicted, is removed: told as a removal, and not as an eviction after.
  ASSERT_TRUE(tier_->Remove(b0_.ref()).ok());
  EXPECT_FALSE(tier_->Contains(b0_.ref()));
  Finish();
  EXPECT_EQ(removed_, std::vector<uint64_t>{0});
  EXPECT_TRUE(handler_.Left().empty());
  EXPECT_EQ(tier_->Stats().evictions, 0u);
  // Block 0's page went to block 2 (block 1 stayed), and no page was lost: block 3 takes
  // one eviction.
  EXPECT_TRUE(tier_->Contains(b1_.ref()));
  EXPECT_TRUE(tier_->Contains(b2_.ref()));
  ASSERT_TRUE(tier_->Put(b3_.header, b3_.payload).ok());
  EXPECT_EQ(tier_->Stats().blocks, 2u);
  EXPECT_EQ(tier_->Stats().evictions, 1u);
}

// Puts from two threads into a tier of 24 pages (blocks of 3 pages: 8 fit) while two
// readers get blocks: every eviction's handler is handed exactly the victim's bytes
// (its pages are not reused while the handler reads them), every get that succeeds
// returns its block's bytes, and every victim handed on leaves exactly once.
TEST(HostTierEvictionTest, ConcurrentEvictionsHandOnExactlyTheVictimsBytes) {
  std::vector<TestBlock> blocks;
  for (uint64_t id = 0; id < 48; ++id) blocks.push_back(MakeBlock(id, 2 * kPage + 1000));
  std::atomic<uint64_t> handed{0}, wrong_handed{0}, left{0}, wrong_read{0}, hits{0};
  HostTierOptions options = SmallHostTier(24);
  options.on_evict = [&](std::span<const EvictedBlockView> victims) {
    for (const EvictedBlockView& victim : victims) {
      std::vector<uint8_t> bytes;
      for (auto range : victim.payload) bytes.insert(bytes.end(), range.begin(), range.end());
      handed.fetch_add(1);
      if (bytes != blocks[victim.header->key.lo].payload) wrong_handed.fetch_add(1);
    }
  };
  options.on_evicted = [&](const BlockHeader&) { left.fetch_add(1); };
  auto tier = Create(std::move(options));
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (uint64_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::vector<uint8_t> out(blocks[0].payload.size());
      for (uint64_t i = r; !done.load(); i += 7) {
        const TestBlock& block = blocks[i % blocks.size()];
        if (!tier->Get(block.ref(), out).ok()) continue;
        hits.fetch_add(1);
        if (out != block.payload) wrong_read.fetch_add(1);
      }
    });
  }
  std::vector<std::thread> putters;
  for (uint64_t p = 0; p < 2; ++p) {
    putters.emplace_back([&, p] {
      for (uint64_t n = p; n < 2000; n += 2) {
        const TestBlock& block = blocks[n % blocks.size()];
        const Status put = tier->Put(block.header, block.payload);
        if (!put.ok() && put.code() != StatusCode::kResourceExhausted) ADD_FAILURE() << put;
      }
    });
  }
  for (std::thread& t : putters) t.join();
  // The readers may not have run yet on a loaded machine (the puts take milliseconds):
  // they go on until one of them has a hit, for at most 10 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (hits.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  done = true;
  for (std::thread& t : threads) t.join();
  EXPECT_GT(handed.load(), 100u) << "the puts evicted";
  EXPECT_EQ(wrong_handed.load(), 0u);
  EXPECT_EQ(wrong_read.load(), 0u);
  EXPECT_GT(hits.load(), 0u);
  EXPECT_EQ(left.load(), handed.load()) << "no remove ran: every victim handed on left";
  EXPECT_EQ(tier->Stats().evictions, left.load());
  EXPECT_LE(tier->Stats().blocks, 8u);
}

}  // namespace
}  // namespace kvtier::storage
