// Gets that lend the host tier's pages (DataStreamServerOptions::lend_pages): the kernel
// reads a sent block's pages until the client reads them. The pages of a reply the client
// acked are the tier's again as they are; those of a reply it never acked are unpinned
// lent after the grace, and the bytes the client reads are the block's as sent even when
// its pages are written again first.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/metrics.h"
#include "services/store/stream/client_pool.h"
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
  // Unacked replies are unpinned lent after 20 ms (the default is 100 ms); an hour, where
  // only an ack may unpin them.
  static DataStreamServerOptions Grace(
      std::chrono::milliseconds grace = std::chrono::milliseconds(20)) {
    DataStreamServerOptions options;
    options.lent_grace = grace;
    return options;
  }
  // A host tier of `blocks` blocks in ordinary pages (explicit huge pages cannot be lent),
  // and a get session, a node's unless `tenant`.
  void Start(uint64_t blocks, DataStreamServerOptions options = Grace(), bool tenant = false) {
    storage::TieredStoreOptions tiers = storage::testing::HostOnly(blocks * kBlockBytes);
    tiers.host->try_huge_pages = false;
    options.registry = &registry_;
    StartNode(std::move(tiers), options);
    ASSERT_TRUE(store_->host_pages().can_lend());
    session_ = server_
                   ->OpenSession({.format_tag = storage::testing::kFormat,
                                  .salt_scope = storage::testing::kScope,
                                  .any_scope = !tenant})
                   .value();
  }
  void Store(const std::vector<TestBlock>& blocks) {
    for (const TestBlock& block : blocks)
      ASSERT_TRUE(store_->Put(block.header, block.payload).ok());
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
  // Block 1 stored and read twice on one connection (the second get acks the first):
  // read whole, and nothing lent.
  void ExpectTwoGetsCopied() {
    const TestBlock one = MakeBlock(1, kBlockBytes);
    Store({one});
    auto client = Client();
    EXPECT_TRUE(Get(*client, one) == one.payload);
    EXPECT_TRUE(Get(*client, one) == one.payload);
    EXPECT_EQ(server_->Stats().bytes_lent, 0u);
  }

  // The node goes first: it updates the registry, a member of this class, destroyed
  // before the fixture's node would be.
  void TearDown() override { server_.reset(); }

  MetricsRegistry registry_;
  TransferTicket session_;
};

// Blocks 1 and 2 fill the host tier. The client reads block 1, then asks for block 2,
// acking block 1's reply: block 1's pages are the tier's again as they are, and block 3
// is written into them in place. Both replies were lent.
TEST_F(LendTest, AnAckedReplysPagesAreWrittenAgainInPlace) {
  Start(2);
  const TestBlock one = MakeBlock(1, kBlockBytes), two = MakeBlock(2, kBlockBytes),
                  three = MakeBlock(3, kBlockBytes);
  Store({one, two});
  auto client = Client();
  EXPECT_TRUE(Get(*client, one) == one.payload);
  EXPECT_TRUE(Get(*client, two) == two.payload);

  ASSERT_TRUE(store_->Remove(one.ref()).ok());
  ASSERT_TRUE(store_->Put(three.header, three.payload).ok())
      << "block 1's pages were unpinned by the ack";
  EXPECT_EQ(Replaced(), 0u);
  // The client has read block 2's reply; the server counts it once its write completes.
  EXPECT_TRUE(kvtier::testing::WaitUntil([&] {
    return server_->Stats().bytes_lent == 2 * kBlockBytes;
  })) << server_->Stats().bytes_lent;
  EXPECT_NE(registry_.Exposition().find("kvtier_stream_lent_bytes_total " +
                                        std::to_string(2 * kBlockBytes) + "\n"),
            std::string::npos)
      << registry_.Exposition();
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
  ASSERT_TRUE(
      kvtier::testing::WaitUntil([&] { return server_->Stats().bytes_lent == kBlockBytes; }));
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

// Block 1 fills the host tier. The client reads it and then leaves the connection idle:
// it acks what it read, by itself (AckReplies), through a connection pool taking it back,
// or by closing. Each time block 1's pages are unpinned in place at once (the grace is an
// hour), and block 3 is written into them without a replaced page.
TEST_F(LendTest, AClientLeavingTheConnectionIdleAcksWhatItRead) {
  Start(1, Grace(std::chrono::hours(1)));
  const TestBlock one = MakeBlock(1, kBlockBytes), three = MakeBlock(3, kBlockBytes);
  const auto reuse_block_1s_pages = [&] {
    ASSERT_TRUE(store_->Remove(one.ref()).ok());
    EXPECT_TRUE(kvtier::testing::WaitUntil([&] {
      return store_->Put(three.header, three.payload).ok();
    })) << "block 1's pages stayed pinned";
    ASSERT_TRUE(store_->Remove(three.ref()).ok());
    Store({one});
  };
  Store({one});
  auto client = Client();
  EXPECT_TRUE(Get(*client, one) == one.payload);
  ASSERT_TRUE(client->AckReplies().ok());
  reuse_block_1s_pages();

  DataStreamClientPool pool(/*max_idle_per_address=*/1);
  const Status pooled = pool.Run(server_->address(), [&](DataStreamClient& kept) {
    return Get(kept, one) == one.payload ? Status::Ok() : InternalError("block 1 read wrong");
  });
  ASSERT_TRUE(pooled.ok()) << pooled;
  reuse_block_1s_pages();

  EXPECT_TRUE(Get(*client, one) == one.payload);
  client.reset();
  reuse_block_1s_pages();
  EXPECT_EQ(Replaced(), 0u);
  EXPECT_EQ(server_->Stats().bytes_lent, 3 * kBlockBytes);
}

// An ack must carry the acks flag, in 32 bits, and no secret: else it is refused.
TEST_F(LendTest, AMalformedAckIsRefused) {
  Start(1);
  for (const StreamRequest& ack :
       {StreamRequest{.op = static_cast<uint32_t>(StreamOp::kAck), .ticket_id = 3},
        StreamRequest{.op = static_cast<uint32_t>(StreamOp::kAck),
        .ticket_id = kStreamAcksReplies | 3,
        .secret = 1}}) {
    const int fd = kvtier::testing::ConnectRaw(server_->address());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(send(fd, &ack, sizeof(ack), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(ack)));
    StreamReply reply;
    ASSERT_EQ(recv(fd, &reply, sizeof(reply), MSG_WAITALL), static_cast<ssize_t>(sizeof(reply)));
    close(fd);
    EXPECT_EQ(reply.code, static_cast<uint32_t>(StatusCode::kInvalidArgument));
  }
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
  for (size_t i = 0; i < blocks.size(); ++i)
    EXPECT_TRUE(got[i] == blocks[i].payload) << "block " << i + 1;
  EXPECT_TRUE(
      kvtier::testing::WaitUntil([&] { return server_->Stats().bytes_lent == 24 * kBlockBytes; }));
}

// A client asks for 24 blocks (3 MiB, more than the sockets hold) and goes away without
// reading: the reply's write fails, and every block it pinned is unpinned lent. The tier
// then takes 24 new blocks, the pages it replaces among them.
TEST_F(LendTest, AClientThatDiesMidReplyLeavesNothingPinned) {
  Start(24);
  std::vector<TestBlock> blocks, fresh;
  std::vector<BlockKey> keys;
  for (uint64_t id = 1; id <= 24; ++id) {
    blocks.push_back(MakeBlock(id, kBlockBytes));
    fresh.push_back(MakeBlock(100 + id, kBlockBytes));
    keys.push_back(blocks.back().header.key);
  }
  Store(blocks);
  {
    auto client = Client();
    ASSERT_TRUE(client->SendGetKeys(session_, keys).ok());
    ASSERT_TRUE(kvtier::testing::WaitUntil([&] { return server_->Stats().bytes_lent > 0; }));
  }  // gone, its reply unread
  for (const TestBlock& block : blocks) ASSERT_TRUE(store_->Remove(block.ref()).ok());
  EXPECT_TRUE(kvtier::testing::WaitUntil([&] {
    return store_->Put(fresh[0].header, fresh[0].payload).ok();
  })) << "the dead client's pins were kept";
  for (size_t i = 1; i < fresh.size(); ++i) {
    EXPECT_TRUE(store_->Put(fresh[i].header, fresh[i].payload).ok()) << "block " << 100 + i + 1;
  }
  EXPECT_GT(Replaced(), 0u);
}

// A tenant's session may read only its own scope; a reader that lies in its acks could
// read other blocks written into lent pages. Its replies are copied: nothing is lent.
TEST_F(LendTest, ATenantsRepliesAreCopied) {
  Start(2, {}, /*tenant=*/true);
  ExpectTwoGetsCopied();
}

// With lending off, a node's replies are copied too.
TEST_F(LendTest, WithLendingOffNothingIsLent) {
  Start(2, {.lend_pages = false});
  ExpectTwoGetsCopied();
}

}  // namespace
}  // namespace kvtier::store
