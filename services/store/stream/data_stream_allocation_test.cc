// The data stream's hot path allocates nothing per block: once warm, a keyed get (of
// blocks stored, or of blocks missed) or a keyed put of 64 blocks makes no more heap
// allocations, counted process-wide (the client's thread and the node's loops and tier
// threads), than one of 8.
//
// This binary counts with tests/testing/heap_allocations.h; the other stream tests do not.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "services/store/stream/data_stream_client.h"
#include "services/store/stream/data_stream_server.h"
#include "services/store/stream/testing/data_stream_fixture.h"
#include "storage/testing/blocks.h"
#include "storage/testing/tiered_stores.h"
#include "tests/testing/heap_allocations.h"

namespace kvtier::store {
namespace {

using ::kvtier::testing::FewestAllocations;
using storage::testing::kScope;
using storage::testing::MakeBlock;
using storage::testing::TestBlock;
constexpr size_t kBlockBytes = 64 * 1024;
constexpr size_t kFew = 8, kMany = 64;
constexpr int kRounds = 5;
// Allocations a transfer of kMany blocks may make beyond one of kFew.
constexpr uint64_t kSlack = 0;

// A node's host tier of 32 MiB behind a data stream on loopback.
class StreamAllocationTest : public DataStreamFixture {
 protected:
  void SetUp() override { StartNode(storage::testing::HostOnly(32u << 20)); }
};

// Blocks 0-63 stored; keyed gets of 8 and of 64 of them, each into buffers made before:
// under a tenant's session (copied into the socket) and a node's (lent zero copy, each
// reply's pins parked until the next get acks it).
TEST_F(StreamAllocationTest, AKeyedGetAllocatesNothingPerBlock) {
  std::vector<BlockKey> keys;
  for (uint64_t id = 0; id < kMany; ++id) {
    const TestBlock block = MakeBlock(id, kBlockBytes);
    ASSERT_TRUE(store_->Put(block.header, block.payload).ok());
    keys.push_back(block.header.key);
  }
  std::vector<std::vector<uint8_t>> buffers(kMany, std::vector<uint8_t>(kBlockBytes));
  const DataStreamClient::BufferFor into_buffers = [&](size_t i, const storage::BlockHeader&) {
    return std::span<uint8_t>(buffers[i]);
  };
  for (const bool node : {false, true}) {
    SCOPED_TRACE(node ? "a node's session" : "a tenant's session");
    const TransferTicket session =
        server_
            ->OpenSession(
                {.format_tag = storage::testing::kFormat, .salt_scope = kScope, .any_scope = node})
            .value();
    auto client = Client();
    const auto get = [&](size_t blocks) {
      const auto got = client->GetKeys(session, std::span(keys).first(blocks), into_buffers);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(std::count(got->states.begin(), got->states.end(), StreamBlockState::kPresent),
                static_cast<std::ptrdiff_t>(blocks));
    };
    get(kMany);  // warm: the node's staging and the connection's buffers
    get(kMany);
    const uint64_t few = FewestAllocations(kRounds, [&](int) { get(kFew); });
    const uint64_t many = FewestAllocations(kRounds, [&](int) { get(kMany); });
    EXPECT_LE(many, few + kSlack) << "a get of " << kFew << " blocks made " << few
                                  << " allocations, of " << kMany << " blocks " << many;
    EXPECT_EQ(server_->Stats().bytes_lent > 0, node);
  }
}

// A cache misses: keyed gets of 8 and of 64 blocks the node never stored (a lookup gone
// stale) cost no more than one of 8, each miss a constant status.
TEST_F(StreamAllocationTest, AKeyedGetOfBlocksNotStoredAllocatesNothingPerBlock) {
  std::vector<BlockKey> keys;
  for (uint64_t id = 0; id < kMany; ++id) keys.push_back(MakeBlock(5000 + id, 64).header.key);
  const TransferTicket session =
      server_->OpenSession({.format_tag = storage::testing::kFormat, .salt_scope = kScope}).value();
  auto client = Client();
  const DataStreamClient::BufferFor no_buffer = [](size_t, const storage::BlockHeader&) {
    return std::span<uint8_t>();
  };
  const auto get = [&](size_t blocks) {
    const auto got = client->GetKeys(session, std::span(keys).first(blocks), no_buffer);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(std::count(got->states.begin(), got->states.end(), StreamBlockState::kMissing),
              static_cast<std::ptrdiff_t>(blocks));
  };
  get(kMany);  // warm
  get(kMany);
  const uint64_t few = FewestAllocations(kRounds, [&](int) { get(kFew); });
  const uint64_t many = FewestAllocations(kRounds, [&](int) { get(kMany); });
  EXPECT_LE(many, few + kSlack) << "a get of " << kFew << " missing blocks made " << few
                                << " allocations, of " << kMany << " blocks " << many;
}

// Keyed puts of 8 and of 64 new blocks each (their headers and bytes made before), into a
// host tier that drops its coldest blocks to take them.
TEST_F(StreamAllocationTest, AKeyedPutAllocatesNothingPerBlock) {
  const TransferTicket session =
      server_
          ->OpenSession(
              {.op = StreamOp::kPutHeaders, .salt_scope = kScope, .max_blocks = kMaxStreamKeys})
          .value();
  auto client = Client();
  // Every put's blocks, made up front: (2 warm-up + kRounds) puts of kMany, kRounds of kFew.
  std::vector<TestBlock> blocks;
  for (uint64_t id = 0; id < (2 + 2 * kRounds) * kMany; ++id)
    blocks.push_back(MakeBlock(1000 + id, kBlockBytes));
  std::vector<storage::BlockHeader> headers;
  std::vector<std::span<const uint8_t>> payloads;
  for (const TestBlock& b : blocks) {
    headers.push_back(b.header);
    payloads.emplace_back(b.payload);
  }
  size_t next = 0;
  const auto put = [&](size_t count) {
    const auto stored = client->PutBlocks(session, std::span(headers).subspan(next, count),
                                          std::span(payloads).subspan(next, count));
    next += kMany;
    ASSERT_TRUE(stored.ok()) << stored.status();
    ASSERT_EQ(*stored, count);
  };
  put(kMany);  // warm
  put(kMany);
  const uint64_t few = FewestAllocations(kRounds, [&](int) { put(kFew); });
  const uint64_t many = FewestAllocations(kRounds, [&](int) { put(kMany); });
  EXPECT_LE(many, few + kSlack) << "a put of " << kFew << " blocks made " << few
                                << " allocations, of " << kMany << " blocks " << many;
}

}  // namespace
}  // namespace kvtier::store
