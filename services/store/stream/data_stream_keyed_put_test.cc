// Keyed puts on the data stream (protocol.h): a put session, then puts that carry their
// headers on the stream, checked as openPut checks them.
#include <gtest/gtest.h>

#include <cstring>

#include "common/mutex.h"
#include "services/store/stream/data_stream_client.h"
#include "services/store/stream/data_stream_server.h"
#include "services/store/stream/testing/data_stream_fixture.h"
#include "storage/testing/blocks.h"
#include "storage/testing/tiered_stores.h"
#include "tests/testing/test_util.h"

namespace kvtier::store {
namespace {

using storage::testing::kScope;
using storage::testing::MakeBlock;
using storage::testing::TestBlock;
constexpr size_t kBlockBytes = 64 * 1024;

// A node's host tier (`host_bytes`) behind a data stream on loopback.
class KeyedPutTest : public DataStreamFixture {
 protected:
  void SetUp() override { Start({}); }
  void Start(DataStreamServerOptions options, uint64_t host_bytes = 16ull << 20) {
    StartNode(storage::testing::HostOnly(host_bytes), options);
  }

  // A tenant's put session (its scope only), or a node's (any scope).
  TransferTicket Session(bool any_scope = false, uint32_t max_blocks = kMaxStreamKeys) {
    return server_
        ->OpenSession({.op = StreamOp::kPutHeaders,
                       .salt_scope = kScope,
                       .any_scope = any_scope,
                       .max_blocks = max_blocks,
                       .on_request =
                           [this](std::span<const BlockKey> keys) {
                             MutexLock lock(mu_);
                             requested_.insert(requested_.end(), keys.begin(), keys.end());
                           }})
        .value();
  }
  static Result<uint32_t> Put(DataStreamClient& client, const TransferTicket& session,
                              const std::vector<TestBlock>& blocks) {
    std::vector<storage::BlockHeader> headers;
    std::vector<std::span<const uint8_t>> payloads;
    for (const TestBlock& b : blocks) {
      headers.push_back(b.header);
      payloads.emplace_back(b.payload);
    }
    return client.PutBlocks(session, headers, payloads);
  }
  // The block's bytes as stored under `scope`, or empty when it is not there.
  std::vector<uint8_t> Stored(const TestBlock& block, uint64_t scope = kScope) {
    std::vector<uint8_t> out(block.payload.size());
    if (!store_->Get({block.header.key, block.header.format_tag, scope}, out).ok()) return {};
    return out;
  }
  // A request written by hand: the session's request head, then `rest`; the node's reply
  // code and message.
  std::pair<uint32_t, std::string> SendByHand(const TransferTicket& session,
                                              const StreamHeadersHead& head,
                                              const std::string& rest) {
    const StreamRequest request{.op = static_cast<uint32_t>(StreamOp::kPutHeaders),
                                .ticket_id = session.id,
                                .secret = session.secret};
    std::string bytes(reinterpret_cast<const char*>(&request), sizeof(request));
    bytes.append(reinterpret_cast<const char*>(&head), sizeof(head));
    bytes += rest;
    const testing::RawExchange exchange =
        testing::SendRaw(session.data_address, bytes, std::chrono::seconds(5));
    StreamReply reply;
    if (exchange.received.size() < sizeof(reply)) return {~0u, "no reply"};
    std::memcpy(&reply, exchange.received.data(), sizeof(reply));
    return {reply.code, exchange.received.substr(sizeof(reply), reply.message_bytes)};
  }

  Mutex mu_;
  std::vector<BlockKey> requested_ KVTIER_GUARDED_BY(mu_);
};

// Block 1's header names no scope (0: the session's), block 2's the session's scope, block
// 3 is of another format. One connection, one session, two puts: every block is stored
// under the session's scope, and the session's callback sees every key put.
TEST_F(KeyedPutTest, AKeyedPutStoresEveryBlockUnderTheSessionsScope) {
  std::vector<TestBlock> blocks{MakeBlock(1, kBlockBytes, 35, /*salt_scope=*/0),
                                MakeBlock(2, kBlockBytes),
                                MakeBlock(3, 4096, 35, kScope, "other-format")};
  const TransferTicket session = Session();
  EXPECT_EQ(session.total_bytes, 0u);
  auto client = Client();
  const Result<uint32_t> stored = Put(*client, session, {blocks[0], blocks[1]});
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(*stored, 2u);
  ASSERT_TRUE(Put(*client, session, {blocks[2]}).ok()) << "the same session and connection again";
  for (const TestBlock& block : blocks)
    EXPECT_EQ(Stored(block), block.payload) << block.header.key.lo;
  EXPECT_EQ(
      store_->Peek({blocks[0].header.key, storage::testing::kFormat, kScope}).value().salt_scope,
      kScope);
  const DataStreamStats stats = server_->Stats();
  EXPECT_EQ(stats.puts, 2u);
  EXPECT_EQ(stats.bytes_received, 2 * kBlockBytes + 4096);
  EXPECT_EQ(stats.sessions, 1u);
  EXPECT_TRUE(Drained());
  MutexLock lock(mu_);
  EXPECT_EQ(requested_.size(), 3u);
}

// Block 2 names scope 8. A tenant's session (scope 7 only) refuses the put, naming the
// block and the scope, and stores nothing of it; a node's session stores block 2 under
// scope 8.
TEST_F(KeyedPutTest, AHeaderNamingAnotherScopeIsRefusedUnlessTheSessionIsANodes) {
  const std::vector<TestBlock> blocks{MakeBlock(1, 4096), MakeBlock(2, 4096, 35, kScope + 1)};
  const Result<uint32_t> refused = Put(*Client(), Session(), blocks);
  ASSERT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << refused.status();
  EXPECT_NE(refused.status().message().find("block 1"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find("salt scope 8"), std::string::npos) << refused.status();
  EXPECT_TRUE(Stored(blocks[0]).empty());
  EXPECT_TRUE(Drained());

  ASSERT_TRUE(Put(*Client(), Session(/*any_scope=*/true), blocks).ok());
  EXPECT_EQ(Stored(blocks[0]), blocks[0].payload);
  EXPECT_EQ(Stored(blocks[1], kScope + 1), blocks[1].payload);
  EXPECT_TRUE(Stored(blocks[1], kScope).empty()) << "stored under the scope its header names only";
}

TEST_F(KeyedPutTest, AKeyedPutWithACorruptBlockStoresNothingOfItsBatch) {
  std::vector<TestBlock> blocks{MakeBlock(1, kBlockBytes), MakeBlock(2, kBlockBytes)};
  blocks[1].payload[100] ^= 0xFF;  // damaged after its checksum was taken
  const Result<uint32_t> refused = Put(*Client(), Session(), blocks);
  ASSERT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("block 1"), std::string::npos) << refused.status();
  EXPECT_TRUE(Stored(blocks[0]).empty());
  EXPECT_TRUE(Stored(blocks[1]).empty());
  EXPECT_TRUE(Drained());
}

// Heads and header sections that a well-behaved client never sends, each refused with
// what was wrong; nothing is stored, and the session still serves the next put.
TEST_F(KeyedPutTest, MalformedHeadsAndHeadersAreRefusedByName) {
  const TestBlock block = MakeBlock(1, 4096);
  std::string header;
  storage::EncodeHeader(block.header, header);
  const std::string payload(block.payload.begin(), block.payload.end());
  const TransferTicket session = Session();
  struct Case {
    const char* what;
    StreamHeadersHead head;
    std::string rest;
    const char* named;
  };
  const uint32_t size = static_cast<uint32_t>(header.size());
  const Case cases[] = {
      {"no blocks", {0, size}, header + payload, "0 blocks"},
      {"too many blocks", {kMaxStreamKeys + 1, size}, header + payload, "4097 blocks"},
      {"more header bytes than the count allows",
       {1, static_cast<uint32_t>(storage::kMaxEncodedHeaderBytes + 1)},
       header + payload,
       "at most"},
      {"a header cut short",
       {1, size - 4},
       header.substr(0, size - 4) + payload,
       "block 0's header"},
      {"bytes after the last header",
       {1, size + 8},
       header + std::string(8, '\0') + payload,
       "8 bytes after"},
  };
  for (const Case& c : cases) {
    const auto [code, message] = SendByHand(session, c.head, c.rest);
    EXPECT_EQ(code, static_cast<uint32_t>(StatusCode::kInvalidArgument))
        << c.what << ": " << message;
    EXPECT_NE(message.find(c.named), std::string::npos) << c.what << ": " << message;
  }
  TestBlock oversized = MakeBlock(2, 4096);
  oversized.header.priority = 101;
  const Result<uint32_t> refused = Put(*Client(), session, {oversized});
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("priority"), std::string::npos) << refused.status();
  EXPECT_TRUE(Stored(block).empty());
  EXPECT_TRUE(Drained());
  EXPECT_TRUE(Put(*Client(), session, {block}).ok()) << "the session survives malformed requests";
}

TEST_F(KeyedPutTest, ASessionOfAnotherKindATicketOrAWrongSecretIsRefused) {
  const std::vector<TestBlock> blocks{MakeBlock(1, 4096)};
  const TransferTicket get_session =
      server_->OpenSession({.format_tag = storage::testing::kFormat, .salt_scope = kScope}).value();
  EXPECT_EQ(Put(*Client(), get_session, blocks).status().code(), StatusCode::kInvalidArgument);
  const TransferTicket ticket = server_->OpenPut({blocks[0].header}).value();
  EXPECT_EQ(Put(*Client(), ticket, blocks).status().code(), StatusCode::kInvalidArgument);

  const TransferTicket session = Session();
  TransferTicket wrong = session;
  wrong.secret ^= 1;
  EXPECT_EQ(Put(*Client(), wrong, blocks).status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(Stored(blocks[0]).empty()) << "no refused put stored anything";
  EXPECT_TRUE(Put(*Client(), session, blocks).ok()) << "a guess costs the owner nothing";
  const TransferTicket idle = Session();
  clock_.Advance(std::chrono::seconds(31));  // the ttl is 30 s by default
  EXPECT_EQ(Put(*Client(), idle, blocks).status().code(), StatusCode::kNotFound);
}

// The headers and half of block 1's payload, then the client is gone: its staging and
// the host-tier pages reserved for it (the tier holds 1 MiB) are freed and nothing is
// stored. A put of the whole tier then fits without evicting anything.
TEST_F(KeyedPutTest, AClientThatDiesMidPutFreesItsStagingAndStoresNothing) {
  Start({}, /*host_bytes=*/1u << 20);
  const TestBlock block = MakeBlock(1, kBlockBytes);
  std::string header;
  storage::EncodeHeader(block.header, header);
  header.append(reinterpret_cast<const char*>(block.payload.data()), kBlockBytes / 2);
  const TransferTicket session = Session();
  const StreamRequest request{.op = static_cast<uint32_t>(StreamOp::kPutHeaders),
                              .ticket_id = session.id,
                              .secret = session.secret};
  const StreamHeadersHead head{
      .count = 1, .header_bytes = static_cast<uint32_t>(header.size() - kBlockBytes / 2)};
  std::string bytes(reinterpret_cast<const char*>(&request), sizeof(request));
  bytes.append(reinterpret_cast<const char*>(&head), sizeof(head));
  bytes += header;
  ASSERT_TRUE(
      testing::SendRaw(session.data_address, bytes, std::chrono::milliseconds(50)).connected);
  EXPECT_TRUE(Drained());
  EXPECT_TRUE(Stored(block).empty());
  const TestBlock whole = MakeBlock(2, 1u << 20);
  EXPECT_TRUE(store_->Put(whole.header, whole.payload).ok())
      << "the reserved pages were given back";
  EXPECT_EQ(store_->Stats().host->evictions, 0u);
}

// Staging holds 2 MiB, all taken by an open ticket's put: a keyed put is refused before
// its payload is read, to retry (kResourceExhausted), and goes through, on a new
// connection, once that put is done. One larger than the whole bound never can.
TEST_F(KeyedPutTest, AKeyedPutBeyondTheStagingIsRefusedToRetry) {
  Start({.max_staged_bytes = 2ull << 20});
  const TestBlock large = MakeBlock(1, 1536 * 1024);  // takes 2 MiB of staging
  const TransferTicket ticket = server_->OpenPut({large.header}).value();
  const TransferTicket session = Session();
  const std::vector<TestBlock> blocks{MakeBlock(2, kBlockBytes)};
  const Result<uint32_t> refused = Put(*Client(), session, blocks);
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status();
  ASSERT_TRUE(Client()->Put(ticket, std::vector<std::span<const uint8_t>>{large.payload}).ok());
  EXPECT_TRUE(Drained());
  EXPECT_TRUE(Put(*Client(), session, blocks).ok()) << "room again once the first put finished";
  EXPECT_EQ(Put(*Client(), session, {MakeBlock(3, 3u << 20)}).status().code(),
            StatusCode::kInvalidArgument);
}

// The node's per-call limit (here 2 blocks) holds for each keyed transfer of a session.
TEST_F(KeyedPutTest, ASessionCarriesAtMostItsBlocksPerTransfer) {
  const TransferTicket session = Session(/*any_scope=*/false, /*max_blocks=*/2);
  const std::vector<TestBlock> three{MakeBlock(1, 4096), MakeBlock(2, 4096), MakeBlock(3, 4096)};
  const Result<uint32_t> refused = Put(*Client(), session, three);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("1 to 2"), std::string::npos) << refused.status();
  EXPECT_TRUE(Stored(three[0]).empty());
  EXPECT_TRUE(Put(*Client(), session, {three[0], three[1]}).ok());

  for (const StreamSession& bad :
       {StreamSession{.op = StreamOp::kPut},
        StreamSession{.op = StreamOp::kPutHeaders, .max_blocks = 0},
        StreamSession{.op = StreamOp::kPutHeaders, .max_blocks = kMaxStreamKeys + 1}}) {
    EXPECT_EQ(server_->OpenSession(bad).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST_F(KeyedPutTest, HeadersAndPayloadsThatDoNotMatchAreRefusedBeforeAnythingIsSent) {
  const TestBlock block = MakeBlock(1, 4096);
  const TransferTicket session = Session();
  auto client = Client();
  const std::vector<uint8_t> short_payload(100);
  const std::vector<std::span<const uint8_t>> payloads{short_payload};
  const Result<uint32_t> refused =
      client->PutBlocks(session, std::span(&block.header, 1), payloads);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("100 bytes"), std::string::npos) << refused.status();
  EXPECT_EQ(client->PutBlocks(session, {}, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(client->broken());
  EXPECT_TRUE(Put(*client, session, {block}).ok()) << "the connection carries the next put";
}

}  // namespace
}  // namespace kvtier::store
