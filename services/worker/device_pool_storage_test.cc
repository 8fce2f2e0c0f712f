// A device pool's code (staging, gathers, scatters, copiers) on the CPU kernels, where its
// staging is smaller than a batch: copies and landings for peers go in rounds, and so do
// the worker's own batches on its loop (offload, onboard, a peer's unheld read), each
// round in a lane's bounded staging; and the limit on staged landings.
#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <memory>
#include <thread>

#include "gpu/kernels.h"
#include "services/worker/pool_storage.h"
#include "services/worker/testing/worker_testing.h"
#include "services/worker/worker.h"

namespace kvtier::worker {
namespace {

using testing::Key;
using testing::kRoot;
using testing::MapTier;
using testing::Pattern;
using testing::TestLayout;
using testing::Tokens;

// What a pool's lanes did: each Gather and Scatter, and the largest staging any allocated.
struct LaneCounts {
  std::atomic<int> gathers = 0;
  std::atomic<int> scatters = 0;
  std::atomic<size_t> largest_staging = 0;
};

// The CPU kernels, counted into LaneCounts.
class CountingBackend final : public gpu::KernelBackend {
 public:
  explicit CountingBackend(std::shared_ptr<LaneCounts> counts) : counts_(std::move(counts)) {}
  std::string_view name() const override { return cpu_->name(); }
  Status UpdateLinear(const gpu::LinearUpdateArgs& args) override {
    return cpu_->UpdateLinear(args);
  }
  Status UpdatePaged(const gpu::PagedUpdateArgs& args) override { return cpu_->UpdatePaged(args); }
  Status Gather(const gpu::BlockCopyArgs& args) override {
    ++counts_->gathers;
    return cpu_->Gather(args);
  }
  Status Scatter(const gpu::BlockCopyArgs& args) override {
    ++counts_->scatters;
    return cpu_->Scatter(args);
  }
  Status Quantize(const gpu::QuantizeArgs& args) override { return cpu_->Quantize(args); }
  Status Dequantize(const gpu::DequantizeArgs& args) override { return cpu_->Dequantize(args); }
  Status DecodeAttention(const gpu::DecodeAttentionArgs& args) override {
    return cpu_->DecodeAttention(args);
  }
  Status ChunkedAttention(const gpu::ChunkedAttentionArgs& args) override {
    return cpu_->ChunkedAttention(args);
  }
  Result<void*> Allocate(gpu::MemoryKind kind, size_t bytes) override {
    if (kind == gpu::MemoryKind::kStaging) {
      size_t largest = counts_->largest_staging;
      while (bytes > largest && !counts_->largest_staging.compare_exchange_weak(largest, bytes)) {
      }
    }
    return cpu_->Allocate(kind, bytes);
  }
  void Free(gpu::MemoryKind kind, void* pointer) override { cpu_->Free(kind, pointer); }
  Status Copy(void* dst, const void* src, size_t bytes) override {
    return cpu_->Copy(dst, src, bytes);
  }
  Status Copy2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                size_t height) override {
    return cpu_->Copy2D(dst, dst_pitch, src, src_pitch, width, height);
  }

 private:
  const std::unique_ptr<gpu::KernelBackend> cpu_ = gpu::MakeCpuBackend();
  const std::shared_ptr<LaneCounts> counts_;
};

// A device pool on counted CPU kernels whose lanes stage two TestLayout blocks (1 KiB).
PoolStorageFactory TwoBlockLanes(std::shared_ptr<LaneCounts> counts,
                                 uint32_t max_staged_reads = 4) {
  return [counts, max_staged_reads](size_t bytes) {
    return MakeBackendPoolStorage({.make_backend =
                                       [counts] {
                                         return Result<std::unique_ptr<gpu::KernelBackend>>(
                                             std::make_unique<CountingBackend>(counts));
                                       },
                                   .bytes = bytes,
                                   .copier_staging_bytes = 1024,
                                   .max_staged_reads = max_staged_reads});
  };
}

// The loop's lane stages two blocks at most, as a copier does: five blocks evicted by one
// allocation leave in three gathers (2, 2 and 1 blocks), come back by one onboard in three
// scatters, and a peer's read of the five, out of order, takes three gathers; each block
// byte for byte, and no lane ever stages more than 1 KiB.
TEST(DevicePoolOnCpuTest, TheLoopsBatchesGoInRoundsOfItsStaging) {
  auto counts = std::make_shared<LaneCounts>();
  MapTier tier;
  auto created = Worker::Create({.pools = {{TestLayout(), 5}},
                                 .offload = &tier,
                                 .onboard = &tier,
                                 .pool_storage = TwoBlockLanes(counts)});
  ASSERT_TRUE(created.ok()) << created.status();
  Worker& worker = **created;
  const std::vector<BlockKey> keys = {Key(1), Key(2), Key(3), Key(4), Key(5)};
  kvtier::RetentionConfig keep{.ranges = {{.first_token = 0, .priority = 50}}};
  // Sequence 1 fills the pool with blocks 1-5, each its own pattern, and commits them.
  auto a = worker.Allocate(
      {.client = 1, .sequence = 1, .root = kRoot, .block_keys = keys, .tokens = Tokens(0, 20)});
  ASSERT_TRUE(a.ok()) << a.status();
  for (uint8_t i = 0; i < 5; ++i)
    ASSERT_TRUE(worker.bytes().Write(0, a->block_table[i], Pattern(i + 1)).ok());
  ASSERT_TRUE(worker.Commit(1, 1, keys, Tokens(0, 20), keep).ok());
  ASSERT_TRUE(worker.Free(1, 1).ok());

  // Sequence 2 needs the whole pool: all five are evicted at once and offloaded.
  const int gathers_before_offload = counts->gathers;
  const std::vector<BlockKey> other = {Key(11), Key(12), Key(13), Key(14), Key(15)};
  ASSERT_TRUE(worker
                  .Allocate({.client = 1,
                             .sequence = 2,
                             .root = kRoot,
                             .block_keys = other,
                             .tokens = Tokens(500, 20)})
                  .ok());
  ASSERT_EQ(tier.blocks.size(), 5u);
  for (uint8_t i = 0; i < 5; ++i)
    EXPECT_EQ(tier.blocks[keys[i]], Pattern(i + 1)) << "block " << int(i + 1);
  EXPECT_EQ(counts->gathers - gathers_before_offload, 3) << "batches of 2, 2 and 1 blocks";
  EXPECT_EQ(worker.Stats().offloaded_blocks, 5u);
  ASSERT_TRUE(worker.Free(1, 2).ok());

  // Sequence 3 asks for blocks 1-5 again: all five onboarded by one call.
  const int scatters_before_onboard = counts->scatters;
  auto c = worker.Allocate(
      {.client = 1, .sequence = 3, .root = kRoot, .block_keys = keys, .tokens = Tokens(0, 20)});
  ASSERT_TRUE(c.ok()) << c.status();
  auto onboarded = worker.Onboard(1, 3, keys, keep);
  ASSERT_TRUE(onboarded.ok()) << onboarded.status();
  EXPECT_EQ(onboarded->onboarded_blocks, 5u);
  EXPECT_EQ(onboarded->from_host, 5u);
  EXPECT_EQ(counts->scatters - scatters_before_onboard, 3) << "batches of 2, 2 and 1 blocks";
  std::vector<uint8_t> back(512);
  for (uint8_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(worker.bytes().Read(0, c->block_table[i], back).ok());
    EXPECT_EQ(back, Pattern(i + 1)) << "block " << int(i + 1);
  }

  // A peer reads blocks 5, 1, 4, 2 and 3 on the loop: three gathers, each in its buffer.
  const int gathers_before_read = counts->gathers;
  const std::vector<BlockId> asked = {c->block_table[4], c->block_table[0], c->block_table[3],
                                      c->block_table[1], c->block_table[2]};
  std::vector<std::vector<uint8_t>> outs(5, std::vector<uint8_t>(512));
  ASSERT_TRUE(worker.bytes()
                  .ReadMany(0, asked, std::vector<std::span<uint8_t>>(outs.begin(), outs.end()))
                  .ok());
  const uint8_t expected[] = {5, 1, 4, 2, 3};
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(outs[i], Pattern(expected[i])) << "buffer " << i;
  EXPECT_EQ(counts->gathers - gathers_before_read, 3);
  EXPECT_LE(counts->largest_staging, 1024u) << "no lane stages more than two blocks";
}

// A batch is what a lane stages: two blocks of 512 bytes in 1 KiB, or one block larger
// than that. Three blocks at once are refused, naming the limit, and staged nothing; a
// host pool hands out views of itself, with no limit.
TEST(DevicePoolOnCpuTest, ABatchLargerThanTheLanesStagingIsRefused) {
  auto counts = std::make_shared<LaneCounts>();
  auto pool = TwoBlockLanes(counts)(8 * 512);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ((*pool)->BatchLimit(512), 2u);
  EXPECT_EQ((*pool)->BatchLimit(4096), 1u) << "a block larger than the staging goes alone";
  const std::vector<uint32_t> three = {0, 1, 2};
  std::vector<std::span<const uint8_t>> read;
  const Status refused = (*pool)->ReadBlocks(three, 512, &read);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("limit of 2"), std::string::npos) << refused;
  std::vector<std::span<uint8_t>> writable;
  EXPECT_EQ((*pool)->WritableBlocks(three, 512, &writable).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(read.empty() && writable.empty());
  EXPECT_EQ(counts->gathers, 0);
  ASSERT_TRUE((*pool)->ReadBlocks(std::span(three).first(2), 512, &read).ok());
  EXPECT_EQ(read.size(), 2u);

  auto host = MakeHostPoolStorage(8 * 512);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ((*host)->BatchLimit(512), std::numeric_limits<size_t>::max());
}

// The tier has blocks 1, 2, 3 and 5 of a sequence, not 4: an onboard lands blocks 1 and 2
// (first batch), then 3 (the second stops short at 4), and fetches no further, though the
// tier holds block 5.
TEST(DevicePoolOnCpuTest, AnOnboardStopsAtTheBatchThatStopsShort) {
  auto counts = std::make_shared<LaneCounts>();
  MapTier tier;
  for (uint8_t i : {1, 2, 3, 5}) tier.blocks[Key(i)] = Pattern(i);
  auto created = Worker::Create(
      {.pools = {{TestLayout(), 5}}, .onboard = &tier, .pool_storage = TwoBlockLanes(counts)});
  ASSERT_TRUE(created.ok()) << created.status();
  Worker& worker = **created;
  const std::vector<BlockKey> keys = {Key(1), Key(2), Key(3), Key(4), Key(5)};
  auto a = worker.Allocate(
      {.client = 1, .sequence = 1, .root = kRoot, .block_keys = keys, .tokens = Tokens(0, 20)});
  ASSERT_TRUE(a.ok()) << a.status();
  auto onboarded = worker.Onboard(1, 1, keys, {});
  ASSERT_TRUE(onboarded.ok()) << onboarded.status();
  EXPECT_EQ(onboarded->onboarded_blocks, 3u);
  EXPECT_EQ(onboarded->cached_blocks, 3u);
  EXPECT_EQ(counts->scatters, 2) << "blocks 1-2, then block 3";
  std::vector<uint8_t> back(512);
  for (uint8_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(worker.bytes().Read(0, a->block_table[i], back).ok());
    EXPECT_EQ(back, Pattern(i + 1)) << "block " << int(i + 1);
  }
  ASSERT_TRUE(worker.bytes().Read(0, a->block_table[4], back).ok());
  EXPECT_EQ(back, std::vector<uint8_t>(512, 0)) << "block 5 is not fetched after the gap";
  auto state = worker.Sequence(1, 1);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->filled_blocks, 3u);
}

// Blocks 1-3 committed and held. A read staged for a send gathers blocks 3 and 1 into a
// copier's staging by one gather and keeps that copier: a copy of block 2 meanwhile takes
// another, and leaves the staged bytes as they were. The pool stages one read at a time
// (and two blocks at most): a second read, or one of three blocks, is refused
// kResourceExhausted, to be copied instead; once the first goes, a read is staged again.
TEST(DevicePoolOnCpuTest, AReadStagedForASendKeepsItsCopierUntilItGoes) {
  auto counts = std::make_shared<LaneCounts>();
  auto created = Worker::Create({.pools = {{TestLayout(), 5}},
                                 .pool_storage = TwoBlockLanes(counts, /*max_staged_reads=*/1)});
  ASSERT_TRUE(created.ok()) << created.status();
  Worker& worker = **created;
  const std::vector<BlockKey> keys = {Key(1), Key(2), Key(3)};
  auto a = worker.Allocate(
      {.client = 1, .sequence = 1, .root = kRoot, .block_keys = keys, .tokens = Tokens(0, 12)});
  ASSERT_TRUE(a.ok()) << a.status();
  for (uint8_t i = 0; i < 3; ++i)
    ASSERT_TRUE(worker.bytes().Write(0, a->block_table[i], Pattern(i + 1)).ok());
  ASSERT_TRUE(worker.Commit(1, 1, keys, Tokens(0, 12), {}).ok());
  ASSERT_TRUE(worker.held().Hold(0, a->block_table).ok());

  const std::vector<BlockId> three_and_one = {a->block_table[2], a->block_table[0]};
  Result<std::unique_ptr<StagedRead>> staged = InternalError("not run");
  std::thread sender([&] { staged = worker.held().Stage(0, three_and_one); });
  sender.join();
  ASSERT_TRUE(staged.ok()) << staged.status();
  EXPECT_EQ(counts->gathers, 1);
  const std::vector<std::span<const uint8_t>>& views = (*staged)->views();
  ASSERT_EQ(views.size(), 2u);
  std::vector<uint8_t> two(512);
  ASSERT_TRUE(
      worker.held()
          .Copy(0, std::vector<BlockId>{a->block_table[1]}, std::vector<std::span<uint8_t>>{two})
          .ok());
  EXPECT_EQ(two, Pattern(2));
  EXPECT_TRUE(std::ranges::equal(views[0], Pattern(3)))
      << "the staged bytes stay while the read lives";
  EXPECT_TRUE(std::ranges::equal(views[1], Pattern(1)));

  const Status second = worker.held().Stage(0, std::vector<BlockId>{a->block_table[1]}).status();
  EXPECT_EQ(second.code(), StatusCode::kResourceExhausted) << second;
  EXPECT_NE(second.message().find("1 reads staged already"), std::string::npos) << second;
  staged->reset();
  EXPECT_EQ(worker.held().Stage(0, a->block_table).status().code(), StatusCode::kResourceExhausted)
      << "three blocks exceed a copier's staging";
  Result<std::unique_ptr<StagedRead>> again =
      worker.held().Stage(0, std::vector<BlockId>{a->block_table[1]});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(std::ranges::equal((*again)->views()[0], Pattern(2)));
  ASSERT_TRUE(worker.held().Release(0, a->block_table).ok());
}

// A copier stages two blocks (1 KiB) at a time: a copy of five held blocks, asked out of
// order, goes in three rounds, and each block lands in its own buffer; so does a landing
// of five blocks into another sequence's, each into its own block.
TEST(DevicePoolOnCpuTest, ACopyLargerThanACopiersStagingGoesInRounds) {
  auto created = Worker::Create(
      {.pools = {{TestLayout(), 10}}, .pool_storage = testing::DevicePathOnCpu(1024)});
  ASSERT_TRUE(created.ok()) << created.status();
  Worker& worker = **created;
  const std::vector<BlockKey> keys = {Key(1), Key(2), Key(3), Key(4), Key(5)};
  auto a = worker.Allocate(
      {.client = 1, .sequence = 1, .root = kRoot, .block_keys = keys, .tokens = Tokens(0, 20)});
  ASSERT_TRUE(a.ok()) << a.status();
  for (uint8_t i = 0; i < 5; ++i)
    ASSERT_TRUE(worker.bytes().Write(0, a->block_table[i], Pattern(i + 1)).ok());
  ASSERT_TRUE(worker.Commit(1, 1, keys, Tokens(0, 20), {}).ok());
  const std::vector<BlockId> asked = {a->block_table[4], a->block_table[0], a->block_table[3],
                                      a->block_table[1], a->block_table[2]};
  ASSERT_TRUE(worker.held().Hold(0, asked).ok());
  std::vector<std::vector<uint8_t>> outs(5, std::vector<uint8_t>(512));
  ASSERT_TRUE(
      worker.held().Copy(0, asked, std::vector<std::span<uint8_t>>(outs.begin(), outs.end())).ok());
  const uint8_t expected[] = {5, 1, 4, 2, 3};
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(outs[i], Pattern(expected[i])) << "buffer " << i;
  ASSERT_TRUE(worker.held().Release(0, asked).ok());

  const std::vector<BlockKey> others = {Key(11), Key(12), Key(13), Key(14), Key(15)};
  ASSERT_TRUE(worker
                  .Allocate({.client = 1,
                             .sequence = 2,
                             .root = kRoot,
                             .block_keys = others,
                             .tokens = Tokens(100, 20)})
                  .ok());
  auto landing = worker.held().HoldLanding(1, 2, 5);
  ASSERT_TRUE(landing.ok()) << landing.status();
  EXPECT_TRUE(landing->views.empty() && !landing->staged)
      << "5 blocks exceed a copier's staging: the fetch buffers";
  std::vector<std::vector<uint8_t>> fetched;
  for (uint8_t i = 0; i < 5; ++i) fetched.push_back(Pattern(i + 11));
  ASSERT_TRUE(worker.held()
                  .Land(0, landing->blocks,
                        std::vector<std::span<const uint8_t>>(fetched.begin(), fetched.end()))
                  .ok());
  std::vector<uint8_t> back(512);
  for (size_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(worker.bytes().Read(0, landing->blocks[i], back).ok());
    EXPECT_EQ(back, fetched[i]) << "block " << i + 11;
  }
  ASSERT_TRUE(worker.held().Release(0, landing->blocks).ok());
}

// A pool that stages one landing at a time: sequence 1's landing takes the copier's
// staging, sequence 2's (while 1's lives) is left to buffer; once 1's goes, sequence 3's
// is staged again.
TEST(DevicePoolOnCpuTest, LandingsBeyondTheStagedLimitBuffer) {
  auto created = Worker::Create(
      {.pools = {{TestLayout(), 6}},
       .pool_storage = testing::DevicePathOnCpu(32u << 20, /*max_staged_landings=*/1)});
  ASSERT_TRUE(created.ok()) << created.status();
  Worker& worker = **created;
  const auto blank = [&](SequenceId sequence) -> Result<LandingBlocks> {
    const std::vector<BlockKey> keys = {Key(10 * sequence), Key(10 * sequence + 1)};
    KVTIER_RETURN_IF_ERROR(worker
                               .Allocate({.client = 1,
                                          .sequence = sequence,
                                          .root = kRoot,
                                          .block_keys = keys,
                                          .tokens = Tokens(0, 8)})
                               .status());
    return worker.held().HoldLanding(1, sequence, 2);
  };
  Result<LandingBlocks> first = blank(1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->staged);
  Result<LandingBlocks> second = blank(2);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->staged) << "one landing staged at a time";
  EXPECT_TRUE(second->views.empty());
  ASSERT_TRUE(worker.held().Release(0, first->blocks).ok());
  first->staged.reset();
  Result<LandingBlocks> third = blank(3);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_TRUE(third->staged) << "the first landing's copier is free again";
  ASSERT_TRUE(worker.held().Release(0, second->blocks).ok());
  ASSERT_TRUE(worker.held().Release(0, third->blocks).ok());
}

}  // namespace
}  // namespace kvtier::worker
