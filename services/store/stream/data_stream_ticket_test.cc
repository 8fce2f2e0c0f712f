// A data stream's tickets and staging: one transfer per ticket, secrets checked, unused
// tickets expire, staging bounded and freed whatever the client does, refreshes and
// corrupt puts through staging, and the node's transfer metrics.
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

TEST_F(DataStreamTest, ATicketCarriesOneTransferOnly) {
  const std::vector<TestBlock> blocks{MakeBlock(1, 4096)};
  ASSERT_TRUE(Client()->Put(OpenPut(blocks), Payloads(blocks)).ok());
  const StreamGetOpened opened = OpenGet({1});
  auto buffers = Buffers(opened);
  ASSERT_TRUE(Client()->Get(opened.ticket, Spans(buffers)).ok());
  auto again = Client();
  const auto second = again->Get(opened.ticket, Spans(buffers));
  EXPECT_EQ(second.status().code(), StatusCode::kNotFound) << second.status().ToString();
  EXPECT_TRUE(again->broken()) << "a refusal closes the connection";
}

TEST_F(DataStreamTest, AWrongSecretIsRefusedAndTheOwnerStillTransfers) {
  const std::vector<TestBlock> blocks{MakeBlock(1, 4096)};
  const TransferTicket ticket = OpenPut(blocks);
  TransferTicket guessed = ticket;
  guessed.secret ^= 1;
  const auto refused = Client()->Put(guessed, Payloads(blocks));
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << refused.status().ToString();
  EXPECT_FALSE(store_->Contains(blocks[0].ref())) << "nothing stored by the guess";
  EXPECT_TRUE(Client()->Put(ticket, Payloads(blocks)).ok())
      << "the owner's ticket survived the guess";
  EXPECT_TRUE(store_->Contains(blocks[0].ref()));
  EXPECT_TRUE(Drained());
}

TEST_F(DataStreamTest, AnUnusedTicketExpiresAndFreesItsStaging) {
  const std::vector<TestBlock> blocks{MakeBlock(1, kBlockBytes)};
  const TransferTicket ticket = OpenPut(blocks);
  EXPECT_GT(server_->Stats().staged_bytes, 0u);
  clock_.Advance(std::chrono::seconds(31));  // past the 30 s default
  EXPECT_TRUE(Drained()) << "the server's sweep frees it without a transfer";
  EXPECT_EQ(server_->Stats().expired, 1u);
  EXPECT_EQ(Client()->Put(ticket, Payloads(blocks)).status().code(), StatusCode::kNotFound);
}

TEST_F(DataStreamTest, APutWithACorruptBlockStoresNothingOfItsBatch) {
  std::vector<TestBlock> blocks{MakeBlock(1, 4096), MakeBlock(2, 4096)};
  const TransferTicket ticket = OpenPut(blocks);
  blocks[1].payload[100] ^= 0xFF;  // damaged after its checksum was taken
  const auto refused = Client()->Put(ticket, Payloads(blocks));
  ASSERT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("block 1"), std::string::npos)
      << refused.status().message();
  EXPECT_FALSE(store_->Contains(blocks[0].ref()));
  EXPECT_FALSE(store_->Contains(blocks[1].ref()));
}

// The put's payload is read into host-tier pages reserved for it (the tier holds 1 MiB):
// when the client dies half-way, its staging and those pages are freed, and nothing is
// stored. A put of the whole tier then fits without evicting anything.
TEST_F(DataStreamTest, AClientThatDiesMidPutFreesItsStagingAndStoresNothing) {
  Start({}, /*host_bytes=*/1u << 20);
  const std::vector<TestBlock> blocks{MakeBlock(1, kBlockBytes)};
  const TransferTicket ticket = OpenPut(blocks);
  // A raw connection: the request and half the payload, then gone.
  const StreamRequest request{
      .op = static_cast<uint32_t>(StreamOp::kPut), .ticket_id = ticket.id, .secret = ticket.secret};
  std::string bytes(reinterpret_cast<const char*>(&request), sizeof(request));
  bytes.append(reinterpret_cast<const char*>(blocks[0].payload.data()), kBlockBytes / 2);
  ASSERT_TRUE(
      testing::SendRaw(ticket.data_address, bytes, std::chrono::milliseconds(50)).connected);
  EXPECT_TRUE(Drained());
  EXPECT_FALSE(store_->Contains(blocks[0].ref()));
  const TestBlock whole = MakeBlock(2, 1u << 20);
  EXPECT_TRUE(store_->Put(whole.header, whole.payload).ok())
      << "the reserved pages were given back";
  EXPECT_EQ(store_->Stats().host->evictions, 0u);
}

// Block 1 is stored at priority 35, then put again at 80: a put that refreshes a block
// cannot be written in place (nothing new is written), so its payload goes through
// staging, and the block takes the new priority. Block 2 beside it is new and stored.
TEST_F(DataStreamTest, APutOfABlockStoredAlreadyRefreshesItThroughStaging) {
  auto client = Client();
  const std::vector<TestBlock> first{MakeBlock(1, kBlockBytes, 35)};
  ASSERT_TRUE(client->Put(OpenPut(first), Payloads(first)).ok());
  const std::vector<TestBlock> again{MakeBlock(1, kBlockBytes, 80), MakeBlock(2, kBlockBytes)};
  const auto stored = client->Put(OpenPut(again), Payloads(again));
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(*stored, 2u);
  EXPECT_EQ(store_->Peek(again[0].ref()).value().priority, 80);
  std::vector<uint8_t> out(kBlockBytes);
  ASSERT_TRUE(store_->Get(again[1].ref(), out).ok());
  EXPECT_EQ(out, again[1].payload);
  EXPECT_TRUE(Drained());
}

TEST_F(DataStreamTest, StagingIsBoundedAndAnOpenBeyondItIsRefusedUntilTransfersFinish) {
  DataStreamServerOptions options;
  options.max_staged_bytes = 2ull << 20;
  Start(options);
  const std::vector<TestBlock> first{MakeBlock(1, 1536 * 1024)};  // takes 2 MiB of staging
  const std::vector<TestBlock> second{MakeBlock(2, kBlockBytes)};
  const TransferTicket ticket = OpenPut(first);
  std::vector<storage::BlockHeader> headers{second[0].header};
  EXPECT_EQ(server_->OpenPut(headers).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(Client()->Put(ticket, Payloads(first)).ok());
  // The put's staging is freed before its reply is written: no wait for the stream.
  EXPECT_TRUE(server_->OpenPut(headers).ok()) << "room again once the first put was answered";
}

// Staging holds 1 MiB; the host tier holds four 1 MiB blocks. A get of all four opens
// (4 MiB, four times the bound) and stages nothing while its ticket waits: a put can
// still take the whole bound meanwhile. The get then sends every byte from the tier.
TEST_F(DataStreamTest, AGetOfTheHostTiersBlocksStagesNothingWhileItsTicketWaits) {
  Start({.max_staged_bytes = 1ull << 20});
  std::vector<TestBlock> blocks;
  for (uint64_t id = 1; id <= 4; ++id) {
    blocks.push_back(MakeBlock(id, 1u << 20));
    ASSERT_TRUE(store_->Put(blocks.back().header, blocks.back().payload).ok());
  }
  const Result<StreamGetOpened> open =
      server_->OpenGet(Keys({1, 2, 3, 4}), storage::testing::kFormat, kScope, nullptr);
  ASSERT_TRUE(open.ok()) << open.status();
  const StreamGetOpened& opened = *open;
  EXPECT_EQ(opened.states, std::vector<StreamBlockState>(4, StreamBlockState::kPresent));
  EXPECT_EQ(server_->Stats().staged_bytes, 0u);
  const std::vector<TestBlock> put{MakeBlock(9, 1u << 20)};
  ASSERT_TRUE(Client()->Put(OpenPut(put), Payloads(put)).ok())
      << "the whole bound was free for a put";

  auto buffers = Buffers(opened);
  const auto states = Client()->Get(opened.ticket, Spans(buffers));
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ(*states, std::vector<StreamBlockState>(4, StreamBlockState::kPresent));
  for (size_t i = 0; i < blocks.size(); ++i)
    EXPECT_EQ(buffers[i], blocks[i].payload) << "block " << i + 1;
  EXPECT_TRUE(Drained());
}

// A node with 4 MiB of host memory over a disk, and 2 MiB of staging. Block 1 is opened
// from host memory, then pushed down to disk by three blocks of 1.5 MiB. When the get is
// sent, block 1 must be read from disk into staging, but a put's open holds all of it:
// the get is refused as kResourceExhausted, before any byte, and nothing is lost. Once
// the put has been answered (its staging freed), the same get opened again arrives whole
// (read from disk).
TEST_F(DataStreamTest, AGetWhoseBlockLeftHostMemoryTakesStagingWhenSentOrIsRefusedToRetry) {
  kvtier::testing::TempDir dir;
  server_.reset();
  store_ =
      storage::TieredStore::Create(storage::testing::HostOverDisk(4u << 20, dir.path())).value();
  server_ = DataStreamServer::Create(
                {.store = store_.get(), .max_staged_bytes = 2ull << 20, .clock = &clock_})
                .value();

  const TestBlock block = MakeBlock(1, 256 * 1024);
  ASSERT_TRUE(store_->Put(block.header, block.payload).ok());
  const StreamGetOpened opened = OpenGet({1});
  ASSERT_EQ(opened.states[0], StreamBlockState::kPresent);
  for (uint64_t id = 2; id <= 4; ++id) {
    const TestBlock filler = MakeBlock(id, 1536 * 1024);
    ASSERT_TRUE(store_->Put(filler.header, filler.payload).ok());
  }
  ASSERT_EQ(store_->host_pages().Pin(block.ref()).status().code(), StatusCode::kNotFound)
      << "block 1 is on disk only";

  const std::vector<TestBlock> put{MakeBlock(9, 1536 * 1024)};  // its open takes the 2 MiB
  const TransferTicket put_ticket = OpenPut(put);
  auto buffers = Buffers(opened);
  auto client = Client();
  const auto refused = client->Get(opened.ticket, Spans(buffers));
  ASSERT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("not in host memory"), std::string::npos)
      << refused.status();
  EXPECT_TRUE(store_->Contains(block.ref())) << "a refused get loses nothing";

  const auto put_done = Client()->Put(put_ticket, Payloads(put));
  ASSERT_TRUE(put_done.ok()) << put_done.status();
  const StreamGetOpened again = OpenGet({1});
  buffers = Buffers(again);
  const auto states = Client()->Get(again.ticket, Spans(buffers));
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ((*states)[0], StreamBlockState::kPresent);
  EXPECT_EQ(buffers[0], block.payload);
  EXPECT_TRUE(Drained());
}

TEST_F(DataStreamTest, TransfersAreCountedInTheNodesMetrics) {
  MetricsRegistry registry;
  DataStreamServerOptions options;
  options.registry = &registry;
  Start(options);
  const std::vector<TestBlock> blocks{MakeBlock(1, kBlockBytes)};
  auto client = Client();
  ASSERT_TRUE(client->Put(OpenPut(blocks), Payloads(blocks)).ok());
  const StreamGetOpened opened = OpenGet({1});
  auto buffers = Buffers(opened);
  ASSERT_TRUE(client->Get(opened.ticket, Spans(buffers)).ok());
  TransferTicket unknown = opened.ticket;  // used already
  EXPECT_FALSE(Client()->Get(unknown, Spans(buffers)).ok());
  // The stream's thread counts a transfer once its reply is written: wait for it (bounded).
  const std::vector<std::string> want = {
      "kvtier_stream_transfers_total{op=\"put\",result=\"ok\"} 1",
      "kvtier_stream_transfers_total{op=\"get\",result=\"ok\"} 1",
      "kvtier_stream_transfers_total{op=\"get\",result=\"refused\"} 1",
      "kvtier_stream_bytes_total{direction=\"sent\"} 65536",
      "kvtier_stream_bytes_total{direction=\"received\"} 65536",
      "kvtier_stream_transfer_seconds_count{op=\"get\"} 1",
  };
  std::string text;
  testing::WaitUntil([&] {
    text = registry.Exposition();
    return std::all_of(want.begin(), want.end(),
                       [&](const std::string& w) { return text.find(w) != std::string::npos; });
  });
  for (const std::string& w : want) EXPECT_NE(text.find(w), std::string::npos) << w << "\n" << text;
}

TEST_F(DataStreamTest, AHeaderThatCannotDescribeABlockIsRefusedAtOpen) {
  TestBlock block = MakeBlock(1, 4096);
  block.header.priority = 101;
  const auto refused = server_->OpenPut({block.header});
  ASSERT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("block 0"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(server_->Stats().tickets_open, 0u);
}

}  // namespace
}  // namespace kvtier::store
