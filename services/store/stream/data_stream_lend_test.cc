// Gets that lend the host tier's pages (DataStreamServerOptions::lend_pages): the kernel
// reads a sent block's pages until the client reads them. The pages of a reply the client
// acked are the tier's again as they are; those of a reply it never acked are unpinned
// lent after the grace, and the bytes the client reads are the block's as sent even when
// its pages are written again first.
#include <gtest/gtest.h>

#include <vector>

#include "services/store/stream/data_stream_client.h"
#include "services/store/stream/data_stream_server.h"
#include "services/store/stream/testing/data_stream_fixture.h"
#include "storage/testing/blocks.h"
#include "storage/testing/tiered_stores.h"
#include "tests/testing/test_util.h"

namespace kvtier::store {
namespace {

using storage::testing::MakeBlock;
using storage::testing::TestBlock;
constexpr size_t kBlockBytes = 128 * 1024;  // two of the host tier's 64 KiB pages

class LendTest : public DataStreamFixture {
 protected:
  // A host tier of `blocks` blocks in ordinary pages (explicit huge pages cannot be lent),
  // and a get session, a node's unless `tenant`.
  void Start(uint64_t blocks, DataStreamServerOptions options = {}, bool tenant = false) {
    storage::TieredStoreOptions tiers = storage::testing::HostOnly(blocks * kBlockBytes);
    tiers.host->try_huge_pages = false;
    options.lent_grace = std::chrono::milliseconds(20);
    StartNode(std::move(tiers), options);
    ASSERT_TRUE(store_->CanLendHostPages());
    session_ = server_
                   ->OpenSession({.format_tag = storage::testing::kFormat,
                                  .salt_scope = storage::testing::kScope,
                                  .any_scope = !tenant})
                   .value();
  }
  void Store(const std::vector<TestBlock>& blocks) {
    for (const TestBlock& block : blocks) ASSERT_TRUE(store_->Put(block.header, block.payload).ok());
  }
  // A keyed get of `block` read whole; its bytes.
  std::vector<uint8_t> Get(DataStreamClient& client, const TestBlock& block) {
    std::vector<std::vector<uint8_t>> got(1);
    const BlockKey keys[] = {block.header.key};
    const Result<DataStreamClient::KeyedGet> sent = client.GetKeys(session_, keys, Into(got));
    EXPECT_TRUE(sent.ok()) << sent.status();
    return got[0];
  }
  static DataStreamClient::BufferFor Into(std::vector<std::vector<uint8_t>>& bytes) {
    return [&bytes](size_t i, const storage::BlockHeader& header) {
      bytes[i].resize(header.payload_bytes);
      return std::span<uint8_t>(bytes[i]);
    };
  }
  uint64_t Replaced() const { return store_->Stats().host->lent_pages_replaced; }

  TransferTicket session_;
};

// Blocks 1 and 2 fill the host tier. The client reads block 1, then asks for block 2,
// acking block 1's reply: block 1's pages are the tier's again as they are, and block 3
// is written into them in place. Both replies were lent.
TEST_F(LendTest, AnAckedReplysPagesAreWrittenAgainInPlace) {
  Start(2);
  const TestBlock one = MakeBlock(1, kBlockBytes), two = MakeBlock(2, kBlockBytes), three = MakeBlock(3, kBlockBytes);
  Store({one, two});
  auto client = Client();
  EXPECT_TRUE(Get(*client, one) == one.payload);
  EXPECT_TRUE(Get(*client, two) == two.payload);

  ASSERT_TRUE(store_->Remove(one.ref()).ok());
  ASSERT_TRUE(store_->Put(three.header, three.payload).ok()) << "block 1's pages were unpinned by the ack";
  EXPECT_EQ(Replaced(), 0u);
  EXPECT_EQ(server_->Stats().bytes_lent, 2 * kBlockBytes);
}

// Block 1 fills the host tier and is sent to a client that does not read it. Block 1 is
// removed; its pages stay pinned until the connection has been idle for the grace, then
// are unpinned lent, and block 2 is written into fresh memory in their place. The client
// then reads block 1's bytes as sent, and block 2 reads back whole.
TEST_F(LendTest, AnUnackedReplyIsUnpinnedLentAfterTheGrace) {
  Start(1);
  const TestBlock one = MakeBlock(1, kBlockBytes), two = MakeBlock(2, kBlockBytes);
  Store({one});
  auto client = Client();
  const BlockKey keys[] = {one.header.key};
  ASSERT_TRUE(client->SendGetKeys(session_, keys).ok());
  ASSERT_TRUE(kvtier::testing::WaitUntil([&] { return server_->Stats().bytes_lent == kBlockBytes; }));
  ASSERT_TRUE(store_->Remove(one.ref()).ok());
  ASSERT_TRUE(kvtier::testing::WaitUntil([&] { return store_->Put(two.header, two.payload).ok(); }))
      << "block 1's pages were never unpinned";

  std::vector<std::vector<uint8_t>> got(1);
  const Result<DataStreamClient::KeyedGet> sent = client->ReceiveGetKeys(Into(got));
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_TRUE(got[0] == one.payload) << "the client read what was written after block 1 was sent";
  EXPECT_EQ(Replaced(), 2u);
  EXPECT_TRUE(Get(*client, two) == two.payload);
}

// 24 blocks in one get: 3 MiB, three times the splicer's pipe and many times the
// socket's buffers. Every block arrives whole, all of it lent.
TEST_F(LendTest, AGetLargerThanThePipeArrivesWhole) {
  Start(24);
  std::vector<TestBlock> blocks;
  std::vector<BlockKey> keys;
  for (uint64_t id = 1; id <= 24; ++id) {
    blocks.push_back(MakeBlock(id, kBlockBytes));
    keys.push_back(blocks.back().header.key);
  }
  Store(blocks);
  auto client = Client();
  std::vector<std::vector<uint8_t>> got(keys.size());
  const Result<DataStreamClient::KeyedGet> sent = client->GetKeys(session_, keys, Into(got));
  ASSERT_TRUE(sent.ok()) << sent.status();
  for (size_t i = 0; i < blocks.size(); ++i) EXPECT_TRUE(got[i] == blocks[i].payload) << "block " << i + 1;
  EXPECT_TRUE(kvtier::testing::WaitUntil([&] { return server_->Stats().bytes_lent == 24 * kBlockBytes; }));
}

// A tenant's session may read only its own scope; a reader that lies in its acks could
// read other blocks written into lent pages. Its replies are copied: nothing is lent.
TEST_F(LendTest, ATenantsRepliesAreCopied) {
  Start(2, {}, /*tenant=*/true);
  const TestBlock one = MakeBlock(1, kBlockBytes);
  Store({one});
  auto client = Client();
  EXPECT_TRUE(Get(*client, one) == one.payload);
  EXPECT_TRUE(Get(*client, one) == one.payload);
  EXPECT_EQ(server_->Stats().bytes_lent, 0u);
}

// With lending off, a node's replies are copied too.
TEST_F(LendTest, WithLendingOffNothingIsLent) {
  Start(2, {.lend_pages = false});
  const TestBlock one = MakeBlock(1, kBlockBytes);
  Store({one});
  auto client = Client();
  EXPECT_TRUE(Get(*client, one) == one.payload);
  EXPECT_TRUE(Get(*client, one) == one.payload);
  EXPECT_EQ(server_->Stats().bytes_lent, 0u);
}

}  // namespace
}  // namespace kvtier::store
