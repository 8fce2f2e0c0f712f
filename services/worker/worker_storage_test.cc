#include "services/worker/worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>

#include "gpu/device.h"
#include "gpu/kernels.h"
#include "services/worker/pool_storage.h"
#include "services/worker/testing/worker_testing.h"

namespace kvtier::worker {
namespace {

using testing::Key;
using testing::kRoot;
using testing::MapTier;
using testing::Pattern;
using testing::TestLayout;
using testing::Tokens;

// Where a WorkerStorageTest's pool keeps its bytes.
enum class PoolKind { kHost, kGpu, kDeviceOnCpu };

// Offload, onboard and copy-on-partial-reuse through a host pool, a pool in device memory
// where there is a GPU (attach then hands out a CUDA IPC handle; a block written on the
// device is offloaded byte for byte when evicted, onboarded back into the device, and
// partial reuse copies tokens on the device), and the device pool's code run by the CPU
// kernels (DevicePathOnCpu), which runs everywhere. gpu/shared_device_memory_test shows
// another process using the handle.
class WorkerStorageTest : public ::testing::TestWithParam<PoolKind> {
 protected:
  // The GPU pool's runs skip on a machine without a GPU.
  void SetUp() override {
    const gpu::DeviceProbe probe = gpu::ProbeDevices();
    if (GetParam() == PoolKind::kGpu && !probe.has_gpu())
      GTEST_SKIP() << "no GPU: " << probe.cpu_reason;
  }
  bool device_path() const { return GetParam() != PoolKind::kHost; }
  // `options` with this run's pools.
  WorkerOptions With(WorkerOptions options) const {
    if (GetParam() == PoolKind::kGpu) options.device = 0;
    if (GetParam() == PoolKind::kDeviceOnCpu) options.pool_storage = testing::DevicePathOnCpu();
    return options;
  }
};

TEST_P(WorkerStorageTest, OffloadsOnboardsAndCopiesInPoolMemory) {
  MapTier tier;
  auto created =
      Worker::Create(With({.pools = {{TestLayout(), 2}}, .offload = &tier, .onboard = &tier}));
  ASSERT_TRUE(created.ok()) << created.status();
  Worker& worker = **created;
  auto attachment = worker.AttachPool(0, TestLayout());
  ASSERT_TRUE(attachment.ok());
  EXPECT_EQ(attachment->mapping.device_index, GetParam() == PoolKind::kGpu ? 0 : -1);
  EXPECT_EQ(attachment->mapping.cuda_ipc_handle.size(), GetParam() == PoolKind::kGpu ? 64u : 0u);
  EXPECT_EQ(attachment->mapping.shared_memory_name.empty(), device_path());
  EXPECT_EQ(worker.bytes().Host(0).empty(), device_path()) << "device memory has no host view";

  // Sequence 1: block A (key 1, priority 50) written on the device and committed.
  kvtier::RetentionConfig keep{.ranges = {{.first_token = 0, .priority = 50}}};
  auto a = worker.Allocate({.client = 1,
                            .sequence = 1,
                            .root = kRoot,
                            .block_keys = std::vector<BlockKey>{Key(1)},
                            .tokens = Tokens(0, 4)});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(worker.bytes().Write(0, a->block_table[0], Pattern(1)).ok());
  ASSERT_TRUE(worker.Commit(1, 1, std::vector<BlockKey>{Key(1)}, Tokens(0, 4), keep).ok());

  // Sequence 2 shares 3 tokens of A while sequence 1 holds it: a copy on the device.
  auto b = worker.Allocate(
      {.client = 1, .sequence = 2, .root = kRoot, .tokens = std::vector<uint32_t>{0, 1, 2}});
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->reused_tokens, 3u);
  std::vector<uint8_t> copied(512);
  ASSERT_TRUE(worker.bytes().Read(0, b->block_table[0], copied).ok());
  const std::vector<uint8_t> original = Pattern(1);
  const KvLayout layout = TestLayout();
  for (uint32_t layer = 0; layer < 2; ++layer) {
    for (KvPart part : {KvPart::kKey, KvPart::kValue}) {
      for (uint32_t head = 0; head < 2; ++head) {
        const size_t run = layout.ByteOffset(layer, part, head, 0);
        EXPECT_TRUE(std::equal(original.begin() + run, original.begin() + run + 3 * 16,
                               copied.begin() + run));
      }
    }
  }
  ASSERT_TRUE(worker.Free(1, 1).ok());
  ASSERT_TRUE(worker.Free(1, 2).ok());

  // Sequence 3 needs both blocks: A is evicted and offloaded from pool memory.
  auto c = worker.Allocate({.client = 1,
                            .sequence = 3,
                            .root = kRoot,
                            .block_keys = std::vector<BlockKey>{Key(7), Key(8)},
                            .tokens = Tokens(100, 8)});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(tier.blocks.count(Key(1)), 1u);
  EXPECT_EQ(tier.blocks[Key(1)], Pattern(1)) << "the offloaded bytes are the pool's";
  ASSERT_TRUE(worker.Free(1, 3).ok());

  // Sequence 4 asks for A again: onboarded from the tier into pool memory.
  auto d = worker.Allocate({.client = 1,
                            .sequence = 4,
                            .root = kRoot,
                            .block_keys = std::vector<BlockKey>{Key(1)},
                            .tokens = Tokens(0, 4)});
  ASSERT_TRUE(d.ok());
  auto onboarded = worker.Onboard(1, 4, std::vector<BlockKey>{Key(1)}, keep);
  ASSERT_TRUE(onboarded.ok()) << onboarded.status();
  EXPECT_EQ(onboarded->onboarded_blocks, 1u);
  std::vector<uint8_t> back(512);
  ASSERT_TRUE(worker.bytes().Read(0, d->block_table[0], back).ok());
  EXPECT_EQ(back, Pattern(1));
  EXPECT_EQ(worker.bytes().Write(0, 2, Pattern(0)).code(), StatusCode::kInvalidArgument)
      << "block 2 of 2";
}

// Four blocks evicted by one allocation leave in one batch (one gather on a GPU) and come
// back in one (one scatter), each byte for byte.
TEST_P(WorkerStorageTest, BatchesOfBlocksRoundTripThroughTheTier) {
  MapTier tier;
  auto created =
      Worker::Create(With({.pools = {{TestLayout(), 4}}, .offload = &tier, .onboard = &tier}));
  ASSERT_TRUE(created.ok()) << created.status();
  Worker& worker = **created;
  const std::vector<BlockKey> keys = {Key(1), Key(2), Key(3), Key(4)};
  kvtier::RetentionConfig keep{.ranges = {{.first_token = 0, .priority = 50}}};
  // Sequence 1 fills the pool with blocks 1-4, each its own pattern, and commits them.
  auto a = worker.Allocate(
      {.client = 1, .sequence = 1, .root = kRoot, .block_keys = keys, .tokens = Tokens(0, 16)});
  ASSERT_TRUE(a.ok()) << a.status();
  for (uint8_t i = 0; i < 4; ++i)
    ASSERT_TRUE(worker.bytes().Write(0, a->block_table[i], Pattern(i + 1)).ok());
  ASSERT_TRUE(worker.Commit(1, 1, keys, Tokens(0, 16), keep).ok());
  ASSERT_TRUE(worker.Free(1, 1).ok());
  for (const WorkerEvent& e : worker.TakeEvents()) {
    EXPECT_FALSE(e.onboarded) << "blocks 1-4 were computed here";
  }
  // Sequence 2 needs the whole pool: all four are evicted at once and offloaded.
  const std::vector<BlockKey> other = {Key(11), Key(12), Key(13), Key(14)};
  ASSERT_TRUE(worker
                  .Allocate({.client = 1,
                             .sequence = 2,
                             .root = kRoot,
                             .block_keys = other,
                             .tokens = Tokens(500, 16)})
                  .ok());
  ASSERT_EQ(tier.blocks.size(), 4u);
  for (uint8_t i = 0; i < 4; ++i)
    EXPECT_EQ(tier.blocks[keys[i]], Pattern(i + 1)) << "block " << int(i + 1);
  EXPECT_GT(worker.Stats().offload_transfer.count(), 0) << "the batch's transfer time is counted";
  EXPECT_GT(worker.Stats().offload_store.count(), 0) << "and the hand-over to the tier";
  EXPECT_EQ(worker.Stats().onboard_fetch.count(), 0) << "nothing onboarded yet";
  ASSERT_TRUE(worker.Free(1, 2).ok());
  // Sequence 3 asks for blocks 1-4 again: all four onboarded at once.
  auto c = worker.Allocate(
      {.client = 1, .sequence = 3, .root = kRoot, .block_keys = keys, .tokens = Tokens(0, 16)});
  ASSERT_TRUE(c.ok());
  auto onboarded = worker.Onboard(1, 3, keys, keep);
  ASSERT_TRUE(onboarded.ok()) << onboarded.status();
  EXPECT_EQ(onboarded->onboarded_blocks, 4u);
  EXPECT_GT(worker.Stats().onboard_fetch.count(), 0) << "the fetches from the tier are counted";
  size_t stored_onboarded = 0;
  for (const WorkerEvent& e : worker.TakeEvents()) {
    if (e.kind == WorkerEvent::Kind::kStored) stored_onboarded += e.onboarded ? 1 : 100;
  }
  EXPECT_EQ(stored_onboarded, 4u)
      << "the four stored again are marked onboarded, and only they are stored";
  // Once they are in the pool, the tier is told, so that it may let its copies go.
  ASSERT_EQ(tier.landed.size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(tier.landed[i], std::make_pair(keys[i], SourceTier::kHost)) << i;
  std::vector<uint8_t> back(512);
  for (uint8_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(worker.bytes().Read(0, c->block_table[i], back).ok());
    EXPECT_EQ(back, Pattern(i + 1)) << "block " << int(i + 1);
  }
  // A peer's read of blocks 4, 1, 4 and 2 (one repeated): one batch, each in its buffer.
  const std::vector<BlockId> asked = {c->block_table[3], c->block_table[0], c->block_table[3],
                                      c->block_table[1]};
  std::vector<std::vector<uint8_t>> outs(4, std::vector<uint8_t>(512));
  ASSERT_TRUE(worker.bytes()
                  .ReadMany(0, asked, std::vector<std::span<uint8_t>>(outs.begin(), outs.end()))
                  .ok());
  EXPECT_EQ(outs[0], Pattern(4));
  EXPECT_EQ(outs[1], Pattern(1));
  EXPECT_EQ(outs[2], Pattern(4));
  EXPECT_EQ(outs[3], Pattern(2));
}

// A peer's fetch holds committed blocks and reads them off the worker's thread: a host
// pool's in place, a device pool's by a copy of their own (HeldBlocks::Copy, which a host
// pool answers too) or staged for a send (HeldBlocks::Stage). Held, they outlive their
// sequence and are not evicted.
TEST_P(WorkerStorageTest, HeldBlocksAreReadOffTheLoopAndOutliveTheirSequence) {
  auto created = Worker::Create(With({.pools = {{TestLayout(), 2}}}));
  ASSERT_TRUE(created.ok()) << created.status();
  Worker& worker = **created;
  // Sequence 1 computes and commits block 1; its second block stays uncommitted.
  const std::vector<BlockKey> keys = {Key(1)};
  auto a = worker.Allocate(
      {.client = 1, .sequence = 1, .root = kRoot, .block_keys = keys, .tokens = Tokens(0, 6)});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(worker.bytes().Write(0, a->block_table[0], Pattern(1)).ok());
  ASSERT_TRUE(worker.Commit(1, 1, keys, Tokens(0, 6), {}).ok());
  const std::vector<BlockId> committed = {a->block_table[0]};
  auto held = worker.held().Hold(0, committed);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(worker.held().Hold(0, std::vector<BlockId>{a->block_table[1]}).status().code(),
            StatusCode::kFailedPrecondition)
      << "block 2 is not committed";
  EXPECT_EQ(worker.held().Hold(1, committed).status().code(), StatusCode::kNotFound) << "no pool 1";
  ASSERT_TRUE(worker.Free(1, 1).ok());
  // Sequence 2 needs both blocks: the held one is not evicted for it.
  const std::vector<BlockKey> other = {Key(5), Key(6)};
  EXPECT_EQ(worker
                .Allocate({.client = 1,
                           .sequence = 2,
                           .root = kRoot,
                           .block_keys = other,
                           .tokens = Tokens(50, 8)})
                .status()
                .code(),
            StatusCode::kResourceExhausted);
  ASSERT_EQ(held->size(), 1u);
  EXPECT_EQ((*held)[0].empty(), device_path()) << "a device pool's bytes have no host view";
  if (!device_path()) {
    EXPECT_EQ(std::vector<uint8_t>((*held)[0].begin(), (*held)[0].end()), Pattern(1));
  }
  // Another thread copies the held block out while the loop goes on.
  std::vector<uint8_t> copied(512);
  Status copy;
  std::thread reader(
      [&] { copy = worker.held().Copy(0, committed, std::vector<std::span<uint8_t>>{copied}); });
  reader.join();
  ASSERT_TRUE(copy.ok()) << copy;
  EXPECT_EQ(copied, Pattern(1));
  if (device_path()) {  // or, for a send, gathered into a copier's staging and read there
    Result<std::unique_ptr<StagedRead>> staged = InternalError("not run");
    std::thread sender([&] { staged = worker.held().Stage(0, committed); });
    sender.join();
    ASSERT_TRUE(staged.ok()) << staged.status();
    EXPECT_TRUE(std::ranges::equal((*staged)->views().at(0), Pattern(1)));
  }
  ASSERT_TRUE(worker.held().Release(0, committed).ok());
  EXPECT_EQ(worker.held().Release(0, committed).code(), StatusCode::kFailedPrecondition)
      << "released twice";
  EXPECT_TRUE(worker
                  .Allocate({.client = 1,
                             .sequence = 2,
                             .root = kRoot,
                             .block_keys = other,
                             .tokens = Tokens(50, 8)})
                  .ok())
      << "block 1 is evictable again";
}

// Copies out of and into held blocks name what was wrong with them: a pool or block that
// does not exist, a buffer that is not one block, a block landed twice in one batch; so
// does a read staged for a send, which a host pool refuses (its blocks are read in place).
TEST_P(WorkerStorageTest, CopiesOfHeldBlocksRefuseWhatNamesNoBlock) {
  auto created = Worker::Create(With({.pools = {{TestLayout(), 2}}}));
  ASSERT_TRUE(created.ok()) << created.status();
  Worker& worker = **created;
  std::vector<uint8_t> one(512), short_one(100);
  const std::vector<std::span<uint8_t>> outs{one};
  const std::vector<std::span<const uint8_t>> ins{one};
  const Status no_pool = worker.held().Copy(1, std::vector<BlockId>{0}, outs);
  EXPECT_EQ(no_pool.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_pool.message().find("no pool 1"), std::string::npos) << no_pool;
  const Status no_block = worker.held().Land(0, std::vector<BlockId>{2}, ins);
  EXPECT_EQ(no_block.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_block.message().find("HeldBlocks::Land: block 2 of 2"), std::string::npos)
      << no_block;
  const Status short_buffer =
      worker.held().Copy(0, std::vector<BlockId>{1}, std::vector<std::span<uint8_t>>{short_one});
  EXPECT_EQ(short_buffer.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(short_buffer.message().find("with 100 bytes"), std::string::npos) << short_buffer;
  EXPECT_EQ(worker.held().Copy(0, std::vector<BlockId>{0, 1}, outs).code(),
            StatusCode::kInvalidArgument)
      << "two blocks, one buffer";
  const Status twice = worker.held().Land(0, std::vector<BlockId>{1, 1},
                                          std::vector<std::span<const uint8_t>>{one, one});
  EXPECT_EQ(twice.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(twice.message().find("block 1 twice"), std::string::npos) << twice;
  const Status stage_no_block = worker.held().Stage(0, std::vector<BlockId>{0, 2}).status();
  EXPECT_EQ(stage_no_block.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(stage_no_block.message().find("HeldBlocks::Stage: block 2 of 2"), std::string::npos)
      << stage_no_block;
  EXPECT_EQ(worker.held().Stage(3, std::vector<BlockId>{0}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(worker.held().Stage(0, std::vector<BlockId>{0}).status().code(),
            device_path() ? StatusCode::kOk : StatusCode::kFailedPrecondition)
      << "a host pool's held blocks are read in place";
}

// Four readers copy held blocks 1-4 at once, each many times, while the loop writes the
// pool's fifth block over and over: every copy has its block's bytes (each reader a copier
// of its own on a device pool; none waits for the loop's staging).
TEST_P(WorkerStorageTest, ReadersCopyHeldBlocksAtOnceBesideTheLoop) {
  auto created = Worker::Create(With({.pools = {{TestLayout(), 5}}}));
  ASSERT_TRUE(created.ok()) << created.status();
  Worker& worker = **created;
  const std::vector<BlockKey> keys = {Key(1), Key(2), Key(3), Key(4)};
  auto a = worker.Allocate(
      {.client = 1, .sequence = 1, .root = kRoot, .block_keys = keys, .tokens = Tokens(0, 16)});
  ASSERT_TRUE(a.ok()) << a.status();
  for (uint8_t i = 0; i < 4; ++i)
    ASSERT_TRUE(worker.bytes().Write(0, a->block_table[i], Pattern(i + 1)).ok());
  ASSERT_TRUE(worker.Commit(1, 1, keys, Tokens(0, 16), {}).ok());
  ASSERT_TRUE(worker.held().Hold(0, a->block_table).ok());
  auto b = worker.Allocate({.client = 1, .sequence = 2, .root = kRoot, .tokens = Tokens(100, 3)});
  ASSERT_TRUE(b.ok()) << b.status();
  const BlockId fifth = b->block_table[0];
  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  for (uint8_t r = 0; r < 4; ++r) {
    readers.emplace_back([&, r] {
      std::vector<uint8_t> out(512);
      const std::vector<BlockId> block{a->block_table[r]};
      for (int n = 0; n < 200; ++n) {
        const Status copied = worker.held().Copy(0, block, std::vector<std::span<uint8_t>>{out});
        if (!copied.ok() || out != Pattern(r + 1)) ++wrong;
      }
    });
  }
  for (int n = 0; n < 200; ++n)
    ASSERT_TRUE(worker.bytes().Write(0, fifth, Pattern(static_cast<uint8_t>(n))).ok());
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0);
  ASSERT_TRUE(worker.held().Release(0, a->block_table).ok());
}

// An onboard source that answers blocks 1 and 3 from the tier (copied into the staging
// Onboard gives) and block 2 as already in place.
class PartlyInPlace final : public OnboardSource {
 public:
  Result<SourceTier> Fetch(const OnboardBlock& block) override {
    if (block.key == Key(2)) return SourceTier::kRemoteInPlace;
    const std::vector<uint8_t> bytes = Pattern(block.key == Key(1) ? 1 : 3);
    std::copy(bytes.begin(), bytes.end(), block.out.begin());
    return SourceTier::kHost;
  }
  void Landed(std::span<const OnboardBlock> blocks, std::span<const SourceTier>) override {
    for (const OnboardBlock& block : blocks) landed.push_back(block.key);
  }
  std::vector<BlockKey> landed;
};

// Sequence 1's three blocks are held for a landing; block 2's bytes land there (as a
// fetch lands them), then an onboard takes blocks 1 and 3 from a tier and block 2 in
// place: the pool lands 1 and 3 alone (a device pool scatters those two), and block 2
// keeps what landed.
TEST_P(WorkerStorageTest, AnOnboardLandsOnlyTheBlocksNotAlreadyInPlace) {
  auto created = Worker::Create(With({.pools = {{TestLayout(), 3}}}));
  ASSERT_TRUE(created.ok()) << created.status();
  Worker& worker = **created;
  const std::vector<BlockKey> keys = {Key(1), Key(2), Key(3)};
  auto a = worker.Allocate(
      {.client = 1, .sequence = 1, .root = kRoot, .block_keys = keys, .tokens = Tokens(0, 12)});
  ASSERT_TRUE(a.ok()) << a.status();
  auto landing = worker.held().HoldLanding(1, 1, 3);
  ASSERT_TRUE(landing.ok()) << landing.status();
  const std::vector<uint8_t> two = Pattern(2);
  ASSERT_TRUE(worker.held()
                  .Land(0, std::vector<BlockId>{a->block_table[1]},
                        std::vector<std::span<const uint8_t>>{two})
                  .ok());
  PartlyInPlace source;
  auto onboarded = worker.Onboard(1, 1, keys, {}, &source);
  ASSERT_TRUE(onboarded.ok()) << onboarded.status();
  EXPECT_EQ(onboarded->onboarded_blocks, 3u);
  EXPECT_EQ(worker.Stats().landed_in_place, 1u);
  EXPECT_EQ(source.landed, (std::vector<BlockKey>{Key(1), Key(3)}))
      << "block 2 was in place: the pool landed none";
  std::vector<uint8_t> back(512);
  for (uint8_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(worker.bytes().Read(0, a->block_table[i], back).ok());
    EXPECT_EQ(back, Pattern(i + 1)) << "block " << int(i + 1);
  }
  ASSERT_TRUE(worker.held().Release(0, landing->blocks).ok());
}

// Sequence 1 has two full blocks and a partial third, none filled yet. A landing holds
// the two full ones (at most `max_blocks`): what a fetch writes there is the blocks'
// bytes, through a host pool's views, or a device pool's staged views once committed
// (another thread). They outlive the sequence until given back.
TEST_P(WorkerStorageTest, ALandingHoldsTheSequencesBlankFullBlocksUntilGivenBack) {
  auto created = Worker::Create(With({.pools = {{TestLayout(), 3}}}));
  ASSERT_TRUE(created.ok()) << created.status();
  Worker& worker = **created;
  const std::vector<BlockKey> keys = {Key(1), Key(2)};
  auto a = worker.Allocate(
      {.client = 1, .sequence = 1, .root = kRoot, .block_keys = keys, .tokens = Tokens(0, 10)});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->block_table.size(), 3u);
  auto landing = worker.held().HoldLanding(1, 1, 8);
  ASSERT_TRUE(landing.ok()) << landing.status();
  EXPECT_EQ(landing->first_block, 0u);
  EXPECT_EQ(landing->blocks, (std::vector<BlockId>{a->block_table[0], a->block_table[1]}))
      << "not the partial third";
  const std::vector<uint8_t> fetched = Pattern(7);
  ASSERT_EQ(landing->views.size(), 2u);
  std::copy(fetched.begin(), fetched.end(),
            landing->views[1].begin());  // as a fetch writes block 2
  EXPECT_EQ(landing->staged != nullptr, device_path());
  if (device_path()) {  // a copier's staging: the block is as it was until the fetch lands it
    std::vector<uint8_t> before(fetched.size());
    ASSERT_TRUE(worker.bytes().Read(0, a->block_table[1], before).ok());
    EXPECT_EQ(before, std::vector<uint8_t>(fetched.size(), 0));
    Status landed;
    std::thread fetch([&] { landed = landing->staged->Commit(2); });
    fetch.join();
    ASSERT_TRUE(landed.ok()) << landed;
    EXPECT_EQ(landing->staged->Commit(3).code(), StatusCode::kInvalidArgument) << "two staged";
  }
  std::vector<uint8_t> read(fetched.size());
  ASSERT_TRUE(worker.bytes().Read(0, a->block_table[1], read).ok());
  EXPECT_EQ(read, fetched);
  auto one = worker.held().HoldLanding(1, 1, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->blocks.size(), 1u);
  ASSERT_TRUE(worker.held().Release(0, one->blocks).ok());
  EXPECT_EQ(worker.held().HoldLanding(1, 9, 1).status().code(), StatusCode::kNotFound)
      << "no sequence 9";

  ASSERT_TRUE(worker.Free(1, 1).ok());
  EXPECT_EQ(worker.Stats().pools[0].held, 2u);
  const std::vector<BlockKey> other = {Key(5), Key(6)};
  const AllocateRequest needs_three{
      .client = 1, .sequence = 2, .root = kRoot, .block_keys = other, .tokens = Tokens(50, 10)};
  EXPECT_EQ(worker.Allocate(needs_three).status().code(), StatusCode::kResourceExhausted)
      << "two blocks held";
  ASSERT_TRUE(worker.held().Release(0, landing->blocks).ok());
  EXPECT_EQ(worker.Stats().pools[0].held, 0u);
  EXPECT_TRUE(worker.Allocate(needs_three).ok());
}

INSTANTIATE_TEST_SUITE_P(HostGpuAndDeviceOnCpu, WorkerStorageTest,
                         ::testing::Values(PoolKind::kHost, PoolKind::kGpu, PoolKind::kDeviceOnCpu),
                         [](const auto& info) {
                           switch (info.param) {
                             case PoolKind::kHost: return "HostPool";
                             case PoolKind::kGpu: return "GpuPool";
                             case PoolKind::kDeviceOnCpu: return "DevicePoolOnCpu";
                           }
                           return "Unknown";
                         });

}  // namespace
}  // namespace kvtier::worker
