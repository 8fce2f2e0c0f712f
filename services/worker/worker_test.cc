#include "services/worker/worker.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "gpu/device.h"
#include "common/shared_pool_memory.h"
#include "services/worker/testing/worker_testing.h"

namespace kvtier::worker {
namespace {

using namespace std::chrono_literals;

using testing::Key;
using testing::kRoot;
using testing::Pattern;
using testing::TestLayout;
using testing::Tokens;

class RecordingOffload final : public OffloadTarget {
 public:
  Status Offload(const OffloadBlock& block) override {
    if (refuse) return ResourceExhaustedError("host tier full");
    keys.push_back(block.key);
    first_bytes.push_back(block.bytes[0]);
    EXPECT_EQ(block.bytes.size(), block.layout->bytes_per_block());
    return Status::Ok();
  }
  bool refuse = false;
  std::vector<BlockKey> keys;
  std::vector<uint8_t> first_bytes;
};

std::unique_ptr<Worker> MakeWorker(uint32_t blocks, OffloadTarget* offload = nullptr,
                                   const Clock* clock = nullptr) {
  WorkerOptions options{.pools = {{TestLayout(), blocks}}, .offload = offload};
  if (clock != nullptr) options.clock = clock;
  return Worker::Create(options).value();
}

// A source that holds block 0 only, and the keys it was asked for.
class HoldsBlockZero final : public OnboardSource {
 public:
  Result<SourceTier> Fetch(const OnboardBlock& block) override {
    asked.push_back(block.key);
    if (block.key == Key(0)) return SourceTier::kHost;
    return NotFoundError("block " + block.key.ToHex() + " is not here");
  }
  std::vector<BlockKey> asked;
};

// The default batch fetch asks in chain order and stops at the first block missing:
// of blocks 0-2, block 0 comes, block 1 is missing, block 2 is never asked for.
TEST(OnboardSourceTest, ADefaultBatchFetchStopsAtTheFirstBlockMissing) {
  HoldsBlockZero source;
  std::vector<OnboardBlock> blocks(3);
  for (uint64_t i = 0; i < 3; ++i) blocks[i].key = Key(i);
  const std::vector<Result<SourceTier>> tiers = source.FetchBatch(blocks);
  ASSERT_EQ(tiers.size(), 3u);
  EXPECT_TRUE(tiers[0].ok());
  EXPECT_EQ(tiers[1].status().code(), StatusCode::kNotFound);
  EXPECT_EQ(tiers[2].status().code(), StatusCode::kAborted);
  EXPECT_EQ(source.asked, (std::vector<BlockKey>{Key(0), Key(1)}));
}

TEST(WorkerTest, AttachedProcessesShareBlocksZeroCopy) {
  auto worker = MakeWorker(8);
  auto attachment = worker->AttachPool(0, TestLayout());
  ASSERT_TRUE(attachment.ok()) << attachment.status().ToString();
  EXPECT_EQ(attachment->block_stride_bytes, 512u);
  // Two inference processes map the pool; here, two mappings in this process.
  auto first = SharedPoolMemory::Map(attachment->mapping.shared_memory_name, 8 * 512).value();
  auto second = SharedPoolMemory::Map(attachment->mapping.shared_memory_name, 8 * 512).value();
  // Client 1 prefills 8 tokens (2 blocks), writes their KV and commits them.
  const std::vector<BlockKey> keys = {Key(0), Key(1)};
  const std::vector<uint32_t> tokens = Tokens(0, 8);
  auto a = worker->Allocate({.client = 1,
                             .sequence = 1,
                             .pool_id = 0,
                             .root = kRoot,
                             .block_keys = keys,
                             .tokens = tokens});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  for (BlockId b : a->block_table)
    std::memset(static_cast<char*>(first.data()) + b * 512, 0x40 + b, 512);
  ASSERT_EQ(worker->Commit(1, 1, keys, tokens, {}).value(), 2u);
  ASSERT_TRUE(worker->Free(1, 1).ok());
  // Client 2 sends the same prompt: both blocks are reused, and its mapping shows client
  // 1's bytes without a copy.
  auto b = worker->Allocate({.client = 2,
                             .sequence = 1,
                             .pool_id = 0,
                             .root = kRoot,
                             .block_keys = keys,
                             .tokens = tokens});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->reused_blocks, 2u);
  EXPECT_EQ(b->block_table, a->block_table);
  for (BlockId block : b->block_table)
    EXPECT_EQ(static_cast<const uint8_t*>(second.data())[block * 512 + 100], 0x40 + block);
  EXPECT_EQ(worker->LookupLocal(0, kRoot, keys).value(), 2u);
}

TEST(WorkerTest, AttachRefusesAnotherLayoutAndUnknownPools) {
  auto worker = MakeWorker(4);
  KvLayoutOptions other = TestLayout().options();
  other.head_dim = 16;
  const Status mismatch = worker->AttachPool(0, KvLayout::Create(other).value()).status();
  EXPECT_EQ(mismatch.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(mismatch.message().find("head_dim"), std::string::npos) << mismatch.message();
  EXPECT_EQ(worker->AttachPool(3, TestLayout()).status().code(), StatusCode::kNotFound);
}

TEST(WorkerTest, CopyOnPartialReuseCopiesTheLeadingTokensOfEveryHeadRun) {
  auto worker = MakeWorker(8);
  auto bytes = worker->bytes().Host(0);
  const std::vector<BlockKey> keys = {Key(0)};
  auto a = worker->Allocate(
      {.client = 1, .sequence = 1, .root = kRoot, .block_keys = keys, .tokens = Tokens(10, 4)});
  ASSERT_TRUE(a.ok());
  for (size_t i = 0; i < 512; ++i)
    bytes[a->block_table[0] * 512 + i] = static_cast<uint8_t>(i % 251);
  ASSERT_TRUE(worker->Commit(1, 1, keys, Tokens(10, 4), {}).ok());
  // Sequence 1 still holds the block; a prompt sharing its first 3 tokens gets a copy.
  auto b = worker->Allocate(
      {.client = 2, .sequence = 7, .root = kRoot, .tokens = std::vector<uint32_t>{10, 11, 12}});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->reused_tokens, 3u);
  const size_t src = a->block_table[0] * 512, dst = b->block_table[0] * 512;
  ASSERT_NE(src, dst);
  const KvLayout layout = TestLayout();
  for (uint32_t layer = 0; layer < 2; ++layer) {
    for (KvPart part : {KvPart::kKey, KvPart::kValue}) {
      for (uint32_t head = 0; head < 2; ++head) {
        const size_t run = layout.ByteOffset(layer, part, head, 0);
        EXPECT_EQ(std::memcmp(&bytes[src + run], &bytes[dst + run], 3 * 8 * 2), 0)
            << "3 tokens copied";
        EXPECT_NE(bytes[src + run + 3 * 16], bytes[dst + run + 3 * 16]) << "the 4th token is not";
      }
    }
  }
}

TEST(WorkerTest, ADroppedClientLosesEveryReference) {
  auto worker = MakeWorker(8);
  for (SequenceId s = 1; s <= 3; ++s) {
    ASSERT_TRUE(
        worker->Allocate({.client = 5, .sequence = s, .root = kRoot, .tokens = Tokens(100 * s, 3)})
            .ok());
  }
  ASSERT_TRUE(
      worker->Allocate({.client = 6, .sequence = 1, .root = kRoot, .tokens = Tokens(900, 3)}).ok());
  EXPECT_EQ(worker->Stats().pools[0].in_use, 4u);
  EXPECT_EQ(worker->DropClient(5), 3u);
  EXPECT_EQ(worker->Stats().pools[0].in_use, 1u) << "client 6's block stays";
  EXPECT_EQ(worker->Free(5, 1).code(), StatusCode::kNotFound);
}

TEST(WorkerTest, EvictionOffloadsWhatIsWorthKeepingAndReportsEveryChange) {
  RecordingOffload offload;
  auto worker = MakeWorker(2, &offload);
  // Block A at priority 50 (worth offloading), block B at 20 (dropped); both released.
  kvtier::RetentionConfig keep{.ranges = {{.first_token = 0, .priority = 50}}};
  kvtier::RetentionConfig low{.ranges = {{.first_token = 0, .priority = 20}}};
  ASSERT_TRUE(worker
                  ->Allocate({.client = 1,
                              .sequence = 1,
                              .root = kRoot,
                              .salt_scope = 0xABC,
                              .block_keys = std::vector<BlockKey>{Key(1)},
                              .tokens = Tokens(0, 4)})
                  .ok());
  ASSERT_TRUE(worker->Commit(1, 1, std::vector<BlockKey>{Key(1)}, Tokens(0, 4), keep).ok());
  ASSERT_TRUE(worker
                  ->Allocate({.client = 1,
                              .sequence = 2,
                              .root = kRoot,
                              .block_keys = std::vector<BlockKey>{Key(2)},
                              .tokens = Tokens(50, 4)})
                  .ok());
  ASSERT_TRUE(worker->Commit(1, 2, std::vector<BlockKey>{Key(2)}, Tokens(50, 4), low).ok());
  worker->bytes().Host(0)[worker->AttachPool(0, TestLayout()).value().block_stride_bytes * 0] =
      0x77;  // block 0 is A
  ASSERT_TRUE(worker->Free(1, 1).ok());
  ASSERT_TRUE(worker->Free(1, 2).ok());
  // A new 8-token prompt needs both blocks: B goes (dropped), then A (offloaded).
  ASSERT_TRUE(worker
                  ->Allocate({.client = 1,
                              .sequence = 3,
                              .root = kRoot,
                              .block_keys = std::vector<BlockKey>{Key(7), Key(8)},
                              .tokens = Tokens(500, 8)})
                  .ok());
  EXPECT_EQ(offload.keys, (std::vector<BlockKey>{Key(1)}));
  EXPECT_EQ(offload.first_bytes, (std::vector<uint8_t>{0x77}))
      << "the bytes were read before the block was reused";
  const std::vector<WorkerEvent> events = worker->TakeEvents();
  ASSERT_EQ(events.size(), 4u);  // stored A, stored B, removed B, offloaded A
  EXPECT_EQ(events[2].kind, WorkerEvent::Kind::kRemoved);
  EXPECT_EQ(events[2].key, Key(2));
  EXPECT_EQ(events[3].kind, WorkerEvent::Kind::kOffloaded);
  EXPECT_EQ(events[0].salt_scope, 0xABCu) << "events carry the committing tenant's scope";
  EXPECT_EQ(events[3].salt_scope, 0xABCu);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].sequence, i + 1);
  EXPECT_EQ(worker->Stats().offloaded_blocks, 1u);
}

// A chain evicted at once leaves the pool leaf first, and reaches the offload target root
// first: its blocks are stored, and told to the coordinator, parent before child.
TEST(WorkerTest, AChainEvictedAtOnceIsOffloadedParentFirst) {
  RecordingOffload offload;
  auto worker = MakeWorker(3, &offload);
  kvtier::RetentionConfig keep{.ranges = {{.first_token = 0, .priority = 50}}};
  const std::vector<BlockKey> chain = {Key(1), Key(2), Key(3)};
  ASSERT_TRUE(worker
                  ->Allocate({.client = 1,
                              .sequence = 1,
                              .root = kRoot,
                              .block_keys = chain,
                              .tokens = Tokens(0, 12)})
                  .ok());
  ASSERT_TRUE(worker->Commit(1, 1, chain, Tokens(0, 12), keep).ok());
  ASSERT_TRUE(worker->Free(1, 1).ok());
  (void)worker->TakeEvents();
  // A new 12-token prompt needs all three blocks: the pool evicts 3, 2, 1.
  const std::vector<BlockKey> other = {Key(7), Key(8), Key(9)};
  ASSERT_TRUE(worker
                  ->Allocate({.client = 1,
                              .sequence = 2,
                              .root = kRoot,
                              .block_keys = other,
                              .tokens = Tokens(500, 12)})
                  .ok());
  EXPECT_EQ(offload.keys, chain) << "root first";
  const std::vector<WorkerEvent> events = worker->TakeEvents();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].key, Key(3)) << "the pool's own events keep its eviction order, leaf first";
}

TEST(WorkerTest, ARefusedOffloadBecomesARemoval) {
  RecordingOffload offload;
  offload.refuse = true;
  auto worker = MakeWorker(1, &offload);
  ASSERT_TRUE(worker
                  ->Allocate({.client = 1,
                              .sequence = 1,
                              .root = kRoot,
                              .block_keys = std::vector<BlockKey>{Key(1)},
                              .tokens = Tokens(0, 4)})
                  .ok());
  ASSERT_TRUE(worker->Commit(1, 1, std::vector<BlockKey>{Key(1)}, Tokens(0, 4), {}).ok());
  ASSERT_TRUE(worker->Free(1, 1).ok());
  ASSERT_TRUE(
      worker->Allocate({.client = 1, .sequence = 2, .root = kRoot, .tokens = Tokens(9, 2)}).ok());
  const std::vector<WorkerEvent> events = worker->TakeEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].kind, WorkerEvent::Kind::kRemoved)
      << "the host tier refused it: the coordinator must forget it";
  EXPECT_EQ(worker->Stats().dropped_offloads, 1u);
}

TEST(WorkerTest, BadRequestsNameWhatIsWrong) {
  auto worker = MakeWorker(4);
  const std::vector<BlockKey> one_key = {Key(0)};
  ASSERT_TRUE(worker
                  ->Allocate({.client = 1,
                              .sequence = 1,
                              .root = kRoot,
                              .block_keys = one_key,
                              .tokens = Tokens(0, 6)})
                  .ok());
  EXPECT_EQ(worker->Allocate({.client = 1, .sequence = 3, .root = kRoot, .tokens = Tokens(0, 6)})
                .status()
                .code(),
            StatusCode::kInvalidArgument)
      << "6 tokens have a full block, whose key is missing";
  EXPECT_EQ(worker->Allocate({.client = 1, .sequence = 1, .root = kRoot, .tokens = Tokens(0, 2)})
                .status()
                .code(),
            StatusCode::kAlreadyExists);
  EXPECT_TRUE(
      worker->Allocate({.client = 2, .sequence = 1, .root = kRoot, .tokens = Tokens(0, 2)}).ok())
      << "sequence ids are per client";
  EXPECT_EQ(
      worker
          ->Allocate(
              {.client = 1, .sequence = 2, .pool_id = 9, .root = kRoot, .tokens = Tokens(0, 2)})
          .status()
          .code(),
      StatusCode::kNotFound);
  EXPECT_EQ(worker->Extend(1, 1, 3).status().code(), StatusCode::kInvalidArgument) << "shrinking";
  EXPECT_EQ(worker->Extend(1, 9, 8).status().code(), StatusCode::kNotFound);
  const Status too_many =
      worker->Commit(1, 1, std::vector<BlockKey>{Key(0), Key(1)}, Tokens(0, 8), {}).status();
  EXPECT_EQ(too_many.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("1 full blocks"), std::string::npos) << too_many.message();
  auto grown = worker->Extend(1, 1, 9);
  ASSERT_TRUE(grown.ok());
  EXPECT_EQ(grown->block_table.size(), 3u);
}

TEST(WorkerTest, ReadAndWriteBlockCheckTheBlockAndTheBufferSize) {
  auto worker = MakeWorker(2);
  ASSERT_TRUE(worker->bytes().Write(0, 1, Pattern(9)).ok());
  std::vector<uint8_t> back(512);
  ASSERT_TRUE(worker->bytes().Read(0, 1, back).ok());
  EXPECT_EQ(back, Pattern(9));
  EXPECT_EQ(worker->bytes().Host(0)[512 + 7], Pattern(9)[7])
      << "a host pool's bytes are the same memory";
  const Status outside = worker->bytes().Read(0, 2, back);
  EXPECT_EQ(outside.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(outside.message().find("block 2 of pool 0"), std::string::npos) << outside;
  std::vector<uint8_t> short_buffer(100);
  EXPECT_EQ(worker->bytes().Read(0, 0, short_buffer).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(worker->bytes().Write(1, 0, Pattern(0)).code(), StatusCode::kNotFound) << "no pool 1";
}

TEST(WorkerTest, ReadBlocksChecksEveryBlockBeforeReadingAny) {
  auto worker = MakeWorker(2);
  ASSERT_TRUE(worker->bytes().Write(0, 1, Pattern(9)).ok());
  std::vector<uint8_t> first(512, 0xEE), second(512, 0xEE);
  const std::vector<std::span<uint8_t>> outs = {first, second};
  const Status outside =
      worker->bytes().ReadMany(0, std::vector<BlockId>{1, 2}, outs);  // the pool has blocks 0 and 1
  EXPECT_EQ(outside.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(outside.message().find("block 2 of pool 0"), std::string::npos) << outside;
  EXPECT_EQ(first, std::vector<uint8_t>(512, 0xEE)) << "block 1 was good, yet nothing was read";
  EXPECT_EQ(worker->bytes().ReadMany(0, std::vector<BlockId>{1}, outs).code(),
            StatusCode::kInvalidArgument)
      << "one buffer per block";
  ASSERT_TRUE(worker->bytes().ReadMany(0, std::vector<BlockId>{1, 0}, outs).ok());
  EXPECT_EQ(first, Pattern(9));
}

}  // namespace
}  // namespace kvtier::worker
