// PoolTransfer on its own, over a host pool and a device pool's code on the CPU kernels
// (whose staging holds two blocks, so batches go in rounds): offload order, refusals and
// unreadable victims, onboard stopping at the first missing block, blocks already in place
// left alone, partial-reuse copies, and the counts.
#include "services/worker/pool_transfer.h"

#include <gtest/gtest.h>

#include "services/worker/testing/worker_testing.h"

namespace kvtier::worker {
namespace {

using testing::Key;
using testing::MapTier;
using testing::Pattern;
using testing::TestLayout;

constexpr size_t kBlocks = 8;

// Records the batches it is given; refuses the keys in `refuse`.
class RecordingTarget final : public OffloadTarget {
 public:
  Status Offload(const OffloadBlock& block) override {
    if (std::find(refuse.begin(), refuse.end(), block.key) != refuse.end())
      return ResourceExhaustedError("full");
    order.push_back(block.key);
    bytes.emplace_back(block.bytes.begin(), block.bytes.end());
    return Status::Ok();
  }
  std::vector<Status> OffloadBatch(std::span<const OffloadBlock> blocks) override {
    batches.push_back(blocks.size());
    return OffloadTarget::OffloadBatch(blocks);
  }
  std::vector<BlockKey> refuse, order;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<size_t> batches;
};

class PoolTransferTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    const size_t bytes = kBlocks * layout_.bytes_per_block();
    auto made = GetParam() ? testing::DevicePathOnCpu(2 * layout_.bytes_per_block())(bytes)
                           : MakeHostPoolStorage(bytes);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    storage_ = std::move(*made);
    for (uint32_t b = 0; b < kBlocks; ++b) {
      ASSERT_TRUE(storage_->Write(b * layout_.bytes_per_block(), Pattern(b + 1)).ok());
    }
  }
  TransferPool pool() { return {layout_, *storage_}; }
  std::vector<uint8_t> BlockBytes(uint32_t b) {
    std::vector<uint8_t> out(layout_.bytes_per_block());
    EXPECT_TRUE(storage_->Read(b * layout_.bytes_per_block(), out).ok());
    return out;
  }
  // Victim i is block i under Key(i), evicted leaf first (the pool's order).
  static std::vector<EvictedBlock> Victims(uint32_t n, bool offload = true) {
    std::vector<EvictedBlock> v;
    for (uint32_t i = n; i-- > 0;) v.push_back({i, Key(i), Key(i - 1), i == 0, 7, 9, 50, offload});
    return v;
  }

  KvLayout layout_ = TestLayout();
  std::unique_ptr<PoolStorage> storage_;
};

TEST_P(PoolTransferTest, VictimsGoParentsFirstInBatchesWithTheirBytes) {
  RecordingTarget target;
  PoolTransfer transfer(&target);
  std::vector<EvictedBlock> victims = Victims(5);
  victims[1].offload = false;  // block 3: not worth keeping
  EXPECT_TRUE(transfer.Offload(pool(), victims).empty());
  EXPECT_EQ(target.order, (std::vector<BlockKey>{Key(0), Key(1), Key(2), Key(4)}));
  EXPECT_EQ(target.bytes[3], Pattern(5));  // block 4's bytes
  const std::vector<size_t> batches =
      GetParam() ? std::vector<size_t>{2, 2} : std::vector<size_t>{4};  // staging of 2 blocks
  EXPECT_EQ(target.batches, batches);
  WorkerStats stats;
  transfer.AddTo(stats);
  EXPECT_EQ(stats.offloaded_blocks, 4u);
  EXPECT_EQ(stats.offloaded_bytes, 4 * layout_.bytes_per_block());
  EXPECT_EQ(stats.dropped_offloads, 0u);
}

TEST_P(PoolTransferTest, RefusedAndUnreadableVictimsComeBack) {
  RecordingTarget target;
  target.refuse = {Key(1)};
  PoolTransfer transfer(&target);
  EXPECT_EQ(transfer.Offload(pool(), Victims(3)), std::vector<BlockKey>{Key(1)});
  PoolTransfer nowhere(nullptr);  // no target: every victim is dropped
  EXPECT_EQ(nowhere.Offload(pool(), Victims(2)), (std::vector<BlockKey>{Key(0), Key(1)}));
  WorkerStats stats;
  transfer.AddTo(stats);
  nowhere.AddTo(stats);
  EXPECT_EQ(stats.offloaded_blocks, 2u);
  EXPECT_EQ(stats.dropped_offloads, 3u);
}

TEST_P(PoolTransferTest, OnboardStopsAtTheFirstBlockTheSourceLacks) {
  MapTier tier;
  for (uint32_t i : {0u, 1u, 2u, 4u}) tier.blocks[Key(i)] = Pattern(100 + i);
  PoolTransfer transfer(nullptr);
  const std::vector<uint32_t> blocks = {5, 6, 7, 3, 2};
  const std::vector<BlockKey> keys = {Key(0), Key(1), Key(2), Key(3), Key(4)};
  OnboardResult result;
  ASSERT_TRUE(transfer.Onboard(pool(), {7, 9}, blocks, keys, tier, result).ok());
  EXPECT_EQ(result.onboarded_blocks, 3u);
  EXPECT_EQ(result.from_host, 3u);
  EXPECT_EQ(BlockBytes(5), Pattern(100));
  EXPECT_EQ(BlockBytes(7), Pattern(102));
  EXPECT_EQ(BlockBytes(3), Pattern(4));  // Key(3) missing: untouched, and so is the rest
  EXPECT_EQ(BlockBytes(2), Pattern(3));
  ASSERT_EQ(tier.landed.size(), 3u);
  EXPECT_EQ(tier.landed[2].first, Key(2));
}

// Answers in place for even keys (a peer landed them already), from the host otherwise.
class HalfInPlace final : public OnboardSource {
 public:
  Result<SourceTier> Fetch(const OnboardBlock& block) override {
    if (block.key.lo % 2 == 0) return SourceTier::kRemoteInPlace;
    std::fill(block.out.begin(), block.out.end(), uint8_t{0xAB});
    return SourceTier::kHost;
  }
  void Landed(std::span<const OnboardBlock> blocks, std::span<const SourceTier>) override {
    for (const OnboardBlock& b : blocks) landed.push_back(b.key);
  }
  std::vector<BlockKey> landed;
};

TEST_P(PoolTransferTest, BlocksAlreadyInPlaceAreNotLandedAgain) {
  HalfInPlace source;
  PoolTransfer transfer(nullptr);
  const std::vector<uint32_t> blocks = {0, 1, 2, 3};
  const std::vector<BlockKey> keys = {Key(0), Key(1), Key(2), Key(3)};
  OnboardResult result;
  ASSERT_TRUE(transfer.Onboard(pool(), {}, blocks, keys, source, result).ok());
  EXPECT_EQ(result.onboarded_blocks, 4u);
  EXPECT_EQ(result.from_remote, 2u);
  EXPECT_EQ(BlockBytes(0), Pattern(1));  // in place: left as it was
  EXPECT_EQ(BlockBytes(1), std::vector<uint8_t>(layout_.bytes_per_block(), 0xAB));
  EXPECT_EQ(source.landed, (std::vector<BlockKey>{Key(1), Key(3)}));
  WorkerStats stats;
  transfer.AddTo(stats);
  EXPECT_EQ(stats.landed_in_place, 2u);
}

TEST_P(PoolTransferTest, APartialCopyTakesTheLeadingTokensOfEveryRun) {
  PoolTransfer transfer(nullptr);
  ASSERT_TRUE(transfer.CopyTokens(pool(), {.source = 1, .destination = 4, .tokens = 3}).ok());
  const std::vector<uint8_t> source = Pattern(2), before = Pattern(5), after = BlockBytes(4);
  const size_t token_bytes = layout_.bytes_per_head_row();
  const size_t run = layout_.bytes_per_head_run();
  for (size_t i = 0; i < after.size(); ++i) {
    const bool copied = i % run < 3 * token_bytes;
    ASSERT_EQ(after[i], copied ? source[i] : before[i]) << "byte " << i;
  }
}

// A quantized block's scales follow its values ([layer][k|v][kv_head][token] of fp32): a
// partial copy takes the leading tokens' scales too, or their values would be read with
// the destination's old scales.
TEST_P(PoolTransferTest, APartialCopyOfAQuantizedBlockTakesTheTokensScalesToo) {
  const KvLayout int4 = KvLayout::Create({.num_layers = 2,
                                          .num_kv_heads = 2,
                                          .head_dim = 8,
                                          .tokens_per_block = 4,
                                          .dtype = KvDtype::kInt4})
                            .value();
  const size_t block = int4.bytes_per_block();
  auto made = GetParam() ? testing::DevicePathOnCpu(2 * block)(2 * block)
                         : MakeHostPoolStorage(2 * block);
  ASSERT_TRUE(made.ok()) << made.status();
  std::vector<uint8_t> source(block), before(block);
  for (size_t i = 0; i < block; ++i) {
    source[i] = static_cast<uint8_t>(i * 7 + 1);
    before[i] = static_cast<uint8_t>(i * 11 + 2);
  }
  ASSERT_TRUE((*made)->Write(0, source).ok());
  ASSERT_TRUE((*made)->Write(block, before).ok());
  PoolTransfer transfer(nullptr);
  ASSERT_TRUE(
      transfer.CopyTokens({int4, **made}, {.source = 0, .destination = 1, .tokens = 3}).ok());
  std::vector<uint8_t> after(block);
  ASSERT_TRUE((*made)->Read(block, after).ok());
  for (size_t i = 0; i < block; ++i) {
    const bool copied = i < int4.bytes_of_values()
                            ? i % int4.bytes_per_head_run() < 3 * int4.bytes_per_head_row()
                            : (i - int4.bytes_of_values()) % (4 * sizeof(float)) < 3 * sizeof(float);
    ASSERT_EQ(after[i], copied ? source[i] : before[i]) << "byte " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(HostAndDevicePath, PoolTransferTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "DevicePath" : "Host"; });

}  // namespace
}  // namespace kvtier::worker
