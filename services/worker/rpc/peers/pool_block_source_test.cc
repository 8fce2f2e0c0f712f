// PoolBlockSource: a worker's committed pool blocks served to peers, one at a time or in
// one batch per pool, only under the scope and format they were committed with.
#include "services/worker/rpc/peers/pool_block_source.h"

#include <gtest/gtest.h>

#include <thread>

#include "services/worker/tier_link.h"
#include "services/worker/testing/worker_testing.h"

namespace kvtier::worker {
namespace {

using testing::Key;
using testing::kRoot;
using testing::Pattern;
using testing::TestLayout;

constexpr uint64_t kScope = 42;

// A worker whose pool (host memory; `storage` where set) holds blocks 1, 2 and 3 of one
// chain, committed under kScope; with two pools, the second holds blocks 4 and 5 of
// another.
class PoolBlockSourceTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(nullptr); }
  void Start(PoolStorageFactory storage, uint32_t pools = 1) {
    worker_ = Worker::Create({.pools = std::vector<WorkerPoolConfig>(pools, {TestLayout(), 4}),
                              .pool_storage = std::move(storage)})
                  .value();
    Fill(0, {1, 2, 3});
    if (pools > 1) Fill(1, {4, 5});
    format_ = StorageFormatTag(TestLayout(), 0);
  }
  // Sequence `pool` + 1 in pool `pool`: blocks `ids` (keys and patterns), committed.
  void Fill(uint32_t pool, const std::vector<uint8_t>& ids) {
    std::vector<BlockKey> keys;
    for (uint8_t id : ids) keys.push_back(Key(id));
    const std::vector<uint32_t> tokens =
        testing::Tokens(100 * ids[0], 4 * static_cast<uint32_t>(ids.size()));
    auto a = worker_->Allocate({.client = 1,
                                .sequence = pool + 1,
                                .pool_id = pool,
                                .root = kRoot,
                                .salt_scope = kScope,
                                .block_keys = keys,
                                .tokens = tokens});
    ASSERT_TRUE(a.ok()) << a.status();
    for (size_t i = 0; i < ids.size(); ++i)
      ASSERT_TRUE(worker_->bytes().Write(pool, a->block_table[i], Pattern(ids[i])).ok());
    ASSERT_TRUE(worker_->Commit(1, pool + 1, keys, tokens, {}).ok());
  }

  storage::BlockRef Ref(uint64_t n, uint64_t scope = kScope) const {
    return {Key(n), format_, scope};
  }

  std::unique_ptr<Worker> worker_;
  std::string format_;
};

TEST_F(PoolBlockSourceTest, ABatchReadsTheBlocksItFindsAndNamesTheOnesItDoesNot) {
  PoolBlockSource source(worker_.get());
  // Asked: block 3, block 9 (never computed), block 1, block 2 under another scope, block 3 again.
  const std::vector<storage::BlockRef> refs = {Ref(3), Ref(9), Ref(1), Ref(2, kScope + 1), Ref(3)};
  std::vector<std::vector<uint8_t>> buffers(refs.size(), std::vector<uint8_t>(512, 0xEE));
  const std::vector<std::span<uint8_t>> outs(buffers.begin(), buffers.end());
  const std::vector<Result<storage::BlockHeader>> results = source.ReadBatch(refs, outs);
  ASSERT_EQ(results.size(), refs.size());
  for (size_t i : {0, 2, 4}) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
    EXPECT_EQ(results[i]->key, refs[i].key);
    EXPECT_EQ(results[i]->salt_scope, kScope);
    EXPECT_EQ(results[i]->checksum, 0u)
        << "left to the server, which hashes the bytes off this loop";
  }
  EXPECT_EQ(buffers[0], Pattern(3));
  EXPECT_EQ(buffers[2], Pattern(1));
  EXPECT_EQ(buffers[4], Pattern(3));
  EXPECT_EQ(results[1].status().code(), StatusCode::kNotFound);
  EXPECT_EQ(results[3].status().code(), StatusCode::kNotFound)
      << "another tenant's scope never matches";
  EXPECT_EQ(buffers[3], std::vector<uint8_t>(512, 0xEE));

  // One at a time, the same bytes and header.
  std::vector<uint8_t> one(512);
  const Result<storage::BlockHeader> single = source.Read(Ref(1), one);
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(one, Pattern(1));
  EXPECT_EQ(single->key, results[2]->key);
  EXPECT_EQ(single->checksum, 0u);
}

TEST_F(PoolBlockSourceTest, ABufferOfTheWrongSizeIsRefusedForThatBlockOnly) {
  PoolBlockSource source(worker_.get());
  std::vector<uint8_t> short_buffer(100), right(512);
  const std::vector<storage::BlockRef> refs = {Ref(1), Ref(2)};
  const std::vector<std::span<uint8_t>> outs = {short_buffer, right};
  const std::vector<Result<storage::BlockHeader>> results = source.ReadBatch(refs, outs);
  EXPECT_EQ(results[0].status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(results[1].ok()) << results[1].status();
  EXPECT_EQ(right, Pattern(2));
}

// A peer's keyed get holds blocks 3 and 1 (block 3 twice) and sends them elsewhere; the
// sequence that computed them has left, and another needs the whole pool meanwhile.
TEST_F(PoolBlockSourceTest, HeldBlocksStayInPlaceUntilReleased) {
  PoolBlockSource source(worker_.get());
  const std::vector<storage::BlockRef> refs = {Ref(3), Ref(9), Ref(1), Ref(3)};
  std::vector<Result<store::HeldBlock>> held = source.HoldBatch(refs);
  ASSERT_EQ(held.size(), refs.size());
  EXPECT_EQ(held[1].status().code(), StatusCode::kNotFound) << "block 9 was never computed";
  std::vector<uint64_t> holds;
  for (size_t i : {0, 2, 3}) {
    ASSERT_TRUE(held[i].ok()) << i << ": " << held[i].status();
    EXPECT_EQ(held[i]->header.key, refs[i].key);
    EXPECT_EQ(held[i]->header.payload_bytes, 512u);
    EXPECT_EQ(held[i]->header.checksum, 0u)
        << "left to the reader, which hashes the bytes it copies";
    holds.push_back(held[i]->hold);
  }
  EXPECT_EQ(std::vector<uint8_t>(held[0]->held.begin(), held[0]->held.end()), Pattern(3));
  EXPECT_EQ(std::vector<uint8_t>(held[2]->held.begin(), held[2]->held.end()), Pattern(1));
  EXPECT_EQ(held[3]->held.data(), held[0]->held.data()) << "the same block, held twice";
  ASSERT_TRUE(worker_->Free(1, 1).ok());
  const std::vector<BlockKey> others = {Key(11), Key(12), Key(13)};
  const auto needs_three = [&](SequenceId sequence) {
    return worker_->Allocate({.client = 2,
                              .sequence = sequence,
                              .root = kRoot,
                              .block_keys = others,
                              .tokens = testing::Tokens(100, 12)});
  };
  EXPECT_EQ(needs_three(1).status().code(), StatusCode::kResourceExhausted)
      << "of 4 blocks, blocks 1 and 3 are held: 2 left";
  EXPECT_EQ(std::vector<uint8_t>(held[0]->held.begin(), held[0]->held.end()), Pattern(3))
      << "unchanged";
  const uint64_t foreign[] = {uint64_t{7} << 32};
  EXPECT_EQ(source.ReleaseBatch(foreign, {}).code(), StatusCode::kInvalidArgument) << "pool 7 of 1";
  ASSERT_TRUE(source.ReleaseBatch(holds, {}).ok());
  EXPECT_TRUE(needs_three(2).ok()) << "blocks 1 and 3 are evictable again";
}

// A reader holds blocks 1 and 2 and gives back block 1's checksum (block 2's it did not
// compute): the next reader finds it in block 1's header, and block 2 still without one.
// A checksum list that does not match the holds is refused, nothing released.
TEST_F(PoolBlockSourceTest, AChecksumGivenBackWithAHoldIsInTheNextReadersHeader) {
  PoolBlockSource source(worker_.get());
  const std::vector<storage::BlockRef> refs = {Ref(1), Ref(2)};
  std::vector<Result<store::HeldBlock>> held = source.HoldBatch(refs);
  ASSERT_TRUE(held[0].ok() && held[1].ok());
  const std::vector<uint64_t> holds = {held[0]->hold, held[1]->hold};
  EXPECT_EQ(source.ReleaseBatch(holds, std::vector<uint64_t>{1}).code(),
            StatusCode::kInvalidArgument);
  const uint64_t checksum = storage::PayloadChecksum(held[0]->held);
  ASSERT_TRUE(source.ReleaseBatch(holds, std::vector<uint64_t>{checksum, 0}).ok());
  EXPECT_EQ(worker_->Stats().pools[0].held, 0u);

  const Result<storage::BlockHeader> first = source.Peek(Ref(1));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->checksum, checksum);
  EXPECT_EQ(source.Peek(Ref(2))->checksum, 0u);
}

// The same pool on a device's code path (the CPU kernels standing in for a GPU's).
class DevicePoolBlockSourceTest : public PoolBlockSourceTest {
 protected:
  void SetUp() override { Start(testing::DevicePathOnCpu()); }
};

// A device pool's blocks 3 and 1 are held apart (no host view): another thread copies
// them out by their holds, and block 1's checksum given back is kept as a host pool's is.
// Holds that name no pool, or buffers that do not match them, copy nothing.
TEST_F(DevicePoolBlockSourceTest, BlocksHeldApartAreCopiedOutOnAnyThread) {
  PoolBlockSource source(worker_.get());
  const std::vector<storage::BlockRef> refs = {Ref(3), Ref(9), Ref(1)};
  std::vector<Result<store::HeldBlock>> held = source.HoldBatch(refs);
  ASSERT_EQ(held.size(), refs.size());
  EXPECT_EQ(held[1].status().code(), StatusCode::kNotFound) << "block 9 was never computed";
  ASSERT_TRUE(held[0].ok() && held[2].ok());
  for (size_t i : {0, 2}) {
    EXPECT_TRUE(held[i]->held_apart) << i;
    EXPECT_TRUE(held[i]->held.empty()) << i;
  }
  EXPECT_EQ(worker_->Stats().pools[0].held, 2u);
  const std::vector<uint64_t> holds = {held[0]->hold, held[2]->hold};
  std::vector<std::vector<uint8_t>> bytes(2, std::vector<uint8_t>(512));
  const std::vector<std::span<uint8_t>> outs(bytes.begin(), bytes.end());
  Status copied;
  std::thread reader([&] { copied = source.CopyHeld(holds, outs); });
  reader.join();
  ASSERT_TRUE(copied.ok()) << copied;
  EXPECT_EQ(bytes[0], Pattern(3));
  EXPECT_EQ(bytes[1], Pattern(1));
  const uint64_t foreign[] = {uint64_t{7} << 32};
  EXPECT_EQ(source.CopyHeld(foreign, std::span(outs).first(1)).code(), StatusCode::kInvalidArgument)
      << "pool 7 of 1";
  EXPECT_EQ(source.CopyHeld(holds, std::span(outs).first(1)).code(), StatusCode::kInvalidArgument)
      << "two holds, one buffer";
  const uint64_t checksum = storage::PayloadChecksum(bytes[1]);
  ASSERT_TRUE(source.ReleaseBatch(holds, std::vector<uint64_t>{0, checksum}).ok());
  EXPECT_EQ(worker_->Stats().pools[0].held, 0u);
  EXPECT_EQ(source.Peek(Ref(1))->checksum, checksum);
}

// Two device pools that stage one read at a time each: blocks 3 and 1 in pool 0, block 4
// in pool 1.
class TwoDevicePoolsBlockSourceTest : public PoolBlockSourceTest {
 protected:
  void SetUp() override {
    Start(testing::DevicePathOnCpu(32u << 20, /*max_staged_landings=*/4, /*max_staged_reads=*/1),
          /*pools=*/2);
  }
};

// Blocks 3, 4 and 1, held apart across both pools, staged by another thread with one call
// (a read staged in each pool): their views come in the holds' order. While they live,
// each pool's one staged read is taken: a second is refused kResourceExhausted, as is a
// hold naming no pool kInvalidArgument; once they go, block 4 and 1 are staged again.
TEST_F(TwoDevicePoolsBlockSourceTest, BlocksHeldApartAreStagedAcrossPoolsUntilTheStagingGoes) {
  PoolBlockSource source(worker_.get());
  std::vector<Result<store::HeldBlock>> held =
      source.HoldBatch(std::vector<storage::BlockRef>{Ref(3), Ref(4), Ref(1)});
  std::vector<uint64_t> holds;
  for (const Result<store::HeldBlock>& h : held) {
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_TRUE(h->held_apart);
    holds.push_back(h->hold);
  }
  EXPECT_EQ(holds[1] >> 32, 1u) << "block 4 is pool 1's";
  Result<std::unique_ptr<store::StagedBlocks>> staged = InternalError("not run");
  std::thread sender([&] { staged = source.StageHeld(holds); });
  sender.join();
  ASSERT_TRUE(staged.ok()) << staged.status();
  const std::span<const std::span<const uint8_t>> views = (*staged)->views();
  ASSERT_EQ(views.size(), 3u);
  const uint8_t expected[] = {3, 4, 1};
  for (size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(std::ranges::equal(views[i], Pattern(expected[i]))) << "view " << i;

  EXPECT_EQ(source.StageHeld(std::span(holds).first(1)).status().code(),
            StatusCode::kResourceExhausted)
      << "pool 0 stages one read at a time";
  const uint64_t foreign[] = {uint64_t{7} << 32};
  EXPECT_EQ(source.StageHeld(foreign).status().code(), StatusCode::kInvalidArgument)
      << "pool 7 of 2";
  staged->reset();
  Result<std::unique_ptr<store::StagedBlocks>> again =
      source.StageHeld(std::span(holds).subspan(1));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(std::ranges::equal((*again)->views()[0], Pattern(4)));
  EXPECT_TRUE(std::ranges::equal((*again)->views()[1], Pattern(1)));
  ASSERT_TRUE(source.ReleaseBatch(holds, {}).ok());
  EXPECT_EQ(worker_->Stats().pools[0].held + worker_->Stats().pools[1].held, 0u);
}

}  // namespace
}  // namespace kvtier::worker
