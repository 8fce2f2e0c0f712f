#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "services/store/stream/data_stream_client.h"
#include "services/store/stream/data_stream_server.h"
#include "services/store/stream/testing/data_stream_fixture.h"
#include "services/store/stream/testing/host_stream_fixture.h"
#include "storage/testing/blocks.h"
#include "storage/testing/tiered_stores.h"
#include "tests/testing/test_util.h"

namespace kvtier::store {
namespace {

using storage::testing::kScope;
using storage::testing::MakeBlock;
using storage::testing::TestBlock;

TEST_F(DataStreamTest, PutThenGetMovesEveryByteAndReportsAbsentBlocks) {
  const std::vector<TestBlock> blocks{MakeBlock(1, kBlockBytes), MakeBlock(2, kBlockBytes),
                                      MakeBlock(3, 4096)};
  auto client = Client();
  ASSERT_EQ(client->Put(OpenPut(blocks), Payloads(blocks)).value(), 3u);

  // Blocks 1, 3 and 2 asked; block 9 was never stored.
  const StreamGetOpened opened = OpenGet({1, 9, 3, 2});
  ASSERT_TRUE(opened.headers[0] && opened.headers[2] && opened.headers[3]);
  EXPECT_FALSE(opened.headers[1]);
  EXPECT_EQ(opened.ticket.total_bytes, 2 * kBlockBytes + 4096);
  auto buffers = Buffers(opened);
  const auto states =
      client->Get(opened.ticket, Spans(buffers)).value();  // the same connection again
  EXPECT_EQ(states, (std::vector<StreamBlockState>{
                        StreamBlockState::kPresent, StreamBlockState::kMissing,
                        StreamBlockState::kPresent, StreamBlockState::kPresent}));
  EXPECT_EQ(buffers[0], blocks[0].payload);
  EXPECT_EQ(buffers[2], blocks[2].payload);
  EXPECT_EQ(buffers[3], blocks[1].payload);
  const DataStreamStats stats = server_->Stats();
  EXPECT_EQ(stats.puts, 1u);
  EXPECT_EQ(stats.gets, 1u);
  EXPECT_EQ(stats.bytes_sent, 2 * kBlockBytes + 4096);
  EXPECT_TRUE(Drained());
}

// Three event loops, six clients at once (connections dealt two per loop), each putting
// and reading back blocks of its own: every byte arrives, every staging buffer is freed.
TEST_F(DataStreamTest, ClientsOnSeveralLoopsTransferInParallel) {
  Start({.threads = 3});
  constexpr int kClients = 6, kRounds = 4;
  std::vector<std::thread> clients;
  std::atomic<int> failures{0};
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      auto client = Client();
      for (int round = 0; round < kRounds; ++round) {
        const uint64_t first = 100 * c + 10 * round;
        const std::vector<TestBlock> blocks{MakeBlock(first, kBlockBytes),
                                            MakeBlock(first + 1, kBlockBytes)};
        if (client->Put(OpenPut(blocks), Payloads(blocks)).value_or(0) != 2) ++failures;
        const StreamGetOpened opened = OpenGet({first, first + 1});
        auto buffers = Buffers(opened);
        if (!client->Get(opened.ticket, Spans(buffers)).ok() || buffers[0] != blocks[0].payload ||
            buffers[1] != blocks[1].payload) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(failures.load(), 0);
  const DataStreamStats stats = server_->Stats();
  EXPECT_EQ(stats.puts, uint64_t{kClients * kRounds});
  EXPECT_EQ(stats.gets, uint64_t{kClients * kRounds});
  EXPECT_EQ(stats.bytes_sent, uint64_t{kClients * kRounds * 2 * kBlockBytes});
  EXPECT_TRUE(Drained());
}

// The tiers' blocks are found again when the transfer is sent, with one loop as with
// several: one evicted in between arrives as missing, and the blocks after it still land
// in their own buffers.
TEST_F(DataStreamTest, ABlockEvictedBetweenOpenAndSendArrivesAsMissing) {
  for (const uint32_t loops : {1u, 2u}) {
    SCOPED_TRACE(std::to_string(loops) + " loops");
    Start({.threads = loops});
    const std::vector<TestBlock> blocks{MakeBlock(1, kBlockBytes), MakeBlock(2, kBlockBytes),
                                        MakeBlock(3, 4096)};
    for (const TestBlock& b : blocks) ASSERT_TRUE(store_->Put(b.header, b.payload).ok());
    const StreamGetOpened opened = OpenGet({1, 2, 3});
    EXPECT_EQ(opened.states, std::vector<StreamBlockState>(3, StreamBlockState::kPresent));
    ASSERT_TRUE(store_->Remove(blocks[0].ref()).ok());  // evicted between open and transfer
    auto buffers = Buffers(opened);
    const auto states = Client()->Get(opened.ticket, Spans(buffers)).value();
    EXPECT_EQ(states,
              (std::vector<StreamBlockState>{StreamBlockState::kMissing, StreamBlockState::kPresent,
                                             StreamBlockState::kPresent}));
    EXPECT_EQ(buffers[1], blocks[1].payload);
    EXPECT_EQ(buffers[2], blocks[2].payload);
    EXPECT_EQ(server_->Stats().bytes_sent, kBlockBytes + 4096);
    EXPECT_TRUE(Drained());
  }
}

// Reads exactly `bytes` from a blocking socket into `out`; false when the peer closes first.
bool ReadExactly(int fd, uint8_t* out, size_t bytes) {
  for (size_t got = 0; got < bytes;) {
    const ssize_t n = recv(fd, out + got, bytes - got, 0);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

// A raw connection that has sent the get of `opened` and reads nothing yet: the caller
// reads the reply at its own pace. -1 when it cannot connect or send.
int SendRawGet(const StreamGetOpened& opened) {
  const int fd = testing::ConnectRaw(opened.ticket.data_address);
  if (fd < 0) return -1;
  const StreamRequest request{.op = static_cast<uint32_t>(StreamOp::kGet),
                              .ticket_id = opened.ticket.id,
                              .secret = opened.ticket.secret};
  if (send(fd, &request, sizeof(request), MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(request)))
    return fd;
  close(fd);
  return -1;
}

// The host tier's blocks are sent from its pages. A client reads the reply of a 24 MiB
// block and stops: most of the block waits on the node, its pages pinned. Meanwhile the
// block is removed and 48 MiB of new blocks go through the 64 MiB tier, evicting one
// another: none takes the pinned pages. The client then reads on: every byte is the
// block's, and when it is sent the pages are free again.
TEST_F(DataStreamTest, ABlockOnTheWireKeepsItsBytesWhileTheTierMovesOn) {
  constexpr size_t kBig = 24u << 20;
  const TestBlock big = MakeBlock(1, kBig);
  ASSERT_TRUE(store_->Put(big.header, big.payload).ok());
  const int fd = SendRawGet(OpenGet({1}));
  ASSERT_GE(fd, 0);
  StreamReply reply;
  std::vector<uint8_t> states(PaddedStateBytes(1));
  ASSERT_TRUE(ReadExactly(fd, reinterpret_cast<uint8_t*>(&reply), sizeof(reply)));
  ASSERT_TRUE(ReadExactly(fd, states.data(), states.size()));
  ASSERT_EQ(reply.code, 0u);
  ASSERT_EQ(reply.payload_bytes, kBig);
  EXPECT_EQ(states[0], static_cast<uint8_t>(StreamBlockState::kPresent));

  ASSERT_TRUE(store_->Remove(big.ref()).ok());
  for (uint64_t id = 10; id < 13; ++id) {
    const TestBlock filler = MakeBlock(id, 16u << 20);
    ASSERT_TRUE(store_->Put(filler.header, filler.payload).ok()) << "block " << id;
  }
  EXPECT_FALSE(store_->Contains(MakeBlock(10, 4096).ref())) << "the fillers evicted one another";

  std::vector<uint8_t> received(kBig);
  ASSERT_TRUE(ReadExactly(fd, received.data(), received.size()));
  close(fd);
  EXPECT_TRUE(received == big.payload) << "a byte of the block on the wire changed";
  EXPECT_TRUE(Drained());
  const TestBlock after = MakeBlock(13, 16u << 20);
  ASSERT_TRUE(store_->Put(after.header, after.payload).ok());
  EXPECT_EQ(store_->Stats().host->evictions, 1u)
      << "block 13 took the freed pages, evicting nothing";
}

// A client takes the reply of a 24 MiB get and a little of the block, then goes (closes
// its socket) or stalls (reads no more, past the 200 ms client timeout). Either way the
// node gives the block's pages back: once the block is removed, a block as large as the
// whole 64 MiB tier fits, evicting nothing.
TEST_F(DataStreamTest, AClientThatGoesOrStallsMidGetReleasesThePinnedPages) {
  for (const bool stalls : {false, true}) {
    SCOPED_TRACE(stalls ? "stalls" : "goes");
    Start({.client_timeout = std::chrono::milliseconds(200)});
    const TestBlock big = MakeBlock(1, 24u << 20);
    ASSERT_TRUE(store_->Put(big.header, big.payload).ok());
    const int fd = SendRawGet(OpenGet({1}));
    ASSERT_GE(fd, 0);
    std::vector<uint8_t> first(sizeof(StreamReply) + PaddedStateBytes(1) + 4096);
    ASSERT_TRUE(ReadExactly(fd, first.data(), first.size()));
    if (!stalls) close(fd);
    ASSERT_TRUE(store_->Remove(big.ref()).ok());

    const TestBlock whole = MakeBlock(2, 64u << 20);
    EXPECT_TRUE(testing::WaitUntil([&] { return store_->Put(whole.header, whole.payload).ok(); }))
        << "the pinned pages were never given back";
    EXPECT_EQ(store_->Stats().host->evictions, 0u);
    if (stalls) close(fd);
  }
}

// A block corrupted on disk is never sent, with one loop or several: the send finds it,
// the stream says corrupt, and the tier has deleted it.
class DataStreamLoops : public ::testing::TestWithParam<uint32_t> {};

TEST_P(DataStreamLoops, ABlockCorruptOnDiskArrivesAsCorruptNeverAsBytes) {
  kvtier::testing::TempDir dir;
  const TestBlock good = MakeBlock(1, 8192), bad = MakeBlock(2, 8192);
  const auto open_store = [&] {
    storage::TieredStoreOptions options;
    options.disk.emplace();
    options.disk->path = dir.path();
    options.disk->capacity_bytes = 1 << 20;
    options.disk->memtable_bytes = 1 << 20;
    return storage::TieredStore::Create(std::move(options)).value();
  };
  {
    auto store = open_store();
    ASSERT_TRUE(store->Put(good.header, good.payload).ok());
    ASSERT_TRUE(store->Put(bad.header, bad.payload).ok());
    ASSERT_TRUE(store->Flush().ok());  // the payloads now sit in a segment file
  }
  ASSERT_TRUE(storage::testing::CorruptPayload(dir.path(), bad.payload));
  auto store = open_store();
  auto server = DataStreamServer::Create({.store = store.get(), .threads = GetParam()}).value();
  const std::vector<BlockKey> keys = {good.header.key, bad.header.key};
  const StreamGetOpened opened =
      server->OpenGet(keys, storage::testing::kFormat, kScope, nullptr).value();
  std::vector<std::vector<uint8_t>> buffers;
  for (const auto& header : opened.headers)
    buffers.emplace_back(header ? header->payload_bytes : 0);
  auto client =
      DataStreamClient::Connect({.address = server->address(), .timeout = std::chrono::seconds(5)})
          .value();
  const auto states =
      client->Get(opened.ticket, std::vector<std::span<uint8_t>>(buffers.begin(), buffers.end()))
          .value();
  EXPECT_EQ(states, (std::vector<StreamBlockState>{StreamBlockState::kPresent,
                                                   StreamBlockState::kCorrupt}));
  EXPECT_EQ(buffers[0], good.payload);
  EXPECT_FALSE(store->Contains(bad.ref())) << "deleted by the tier that found it";
}

INSTANTIATE_TEST_SUITE_P(OneAndTwo, DataStreamLoops, ::testing::Values(1u, 2u));

// A worker's pool: blocks outside the tiers, copied in at open.
class OneBlockSource final : public ExtraBlockSource {
 public:
  explicit OneBlockSource(TestBlock block) : block_(std::move(block)) {}
  Result<storage::BlockHeader> Peek(const storage::BlockRef& ref) override {
    if (ref.key != block_.header.key) return NotFoundError("not here");
    return block_.header;
  }
  Result<storage::BlockHeader> Read(const storage::BlockRef& ref, std::span<uint8_t> out) override {
    KVTIER_ASSIGN_OR_RETURN(storage::BlockHeader header, Peek(ref));
    std::copy(block_.payload.begin(), block_.payload.end(), out.begin());
    return header;
  }

 private:
  TestBlock block_;
};

TEST_F(DataStreamTest, BlocksOutsideTheTiersAreServedFromTheExtraSource) {
  const TestBlock in_tiers = MakeBlock(1, 4096);
  ASSERT_TRUE(store_->Put(in_tiers.header, in_tiers.payload).ok());
  OneBlockSource pool(MakeBlock(2, kBlockBytes));  // block 2 is only in the pool
  const StreamGetOpened opened = OpenGet({1, 2}, &pool);
  auto buffers = Buffers(opened);
  const auto states = Client()->Get(opened.ticket, Spans(buffers)).value();
  EXPECT_EQ(states, (std::vector<StreamBlockState>{StreamBlockState::kPresent,
                                                   StreamBlockState::kPresent}));
  EXPECT_EQ(buffers[0], in_tiers.payload);
  EXPECT_EQ(buffers[1], MakeBlock(2, kBlockBytes).payload);
}

TEST_F(DataStreamTest, ARequestThatIsNotOursIsRefusedByName) {
  const TransferTicket ticket = OpenPut({MakeBlock(1, 4096)});
  // An HTTP client on the wrong port: the magic does not match.
  const testing::RawExchange exchange = testing::SendRaw(
      ticket.data_address, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", std::chrono::seconds(5));
  EXPECT_TRUE(exchange.peer_closed) << "the node closes after its refusal";
  StreamReply reply;
  ASSERT_GE(exchange.received.size(), sizeof(reply));
  std::memcpy(&reply, exchange.received.data(), sizeof(reply));
  const std::string message = exchange.received.substr(sizeof(reply), reply.message_bytes);
  EXPECT_EQ(reply.code, static_cast<uint32_t>(StatusCode::kInvalidArgument));
  EXPECT_NE(message.find("magic"), std::string::npos) << message;
  EXPECT_EQ(server_->Stats().tickets_open, 1u) << "the open ticket is untouched";
}

}  // namespace
}  // namespace kvtier::store
