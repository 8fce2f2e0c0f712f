// Keyed gets on the data stream (protocol.h): a get session, then gets that name their
// keys on the stream, answered with each sent block's header and bytes.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <thread>

#include "common/mutex.h"
#include "services/store/stream/data_stream_client.h"
#include "services/store/stream/data_stream_server.h"
#include "services/store/stream/testing/data_stream_fixture.h"
#include "services/store/stream/testing/keyed_get_fixture.h"
#include "services/store/stream/testing/pool_source.h"
#include "storage/testing/blocks.h"
#include "storage/testing/tiered_stores.h"
#include "tests/testing/test_util.h"

namespace kvtier::store {
namespace {

using storage::testing::kScope;
using storage::testing::MakeBlock;
using storage::testing::TestBlock;

// Blocks 1, 2 and 3 stored; block 9 never. Two keyed gets on one connection under one
// session: each present block comes with the header of its bytes, a missing one with
// none, and the session's callback sees every key asked.
TEST_F(KeyedGetTest, AKeyedGetAnswersEachKeyWithItsHeaderAndBytes) {
  const std::vector<TestBlock> blocks{MakeBlock(1, kBlockBytes), MakeBlock(2, kBlockBytes),
                                      MakeBlock(3, 4096)};
  Store(blocks);
  const TransferTicket session = Session();
  EXPECT_EQ(session.total_bytes, 0u);
  auto client = Client();
  Result<Got> first = GetKeys(*client, session, {1, 9, 3, 2});
  ASSERT_TRUE(first.ok()) << first.status();
  Got got = std::move(*first);
  EXPECT_EQ(got.get.states, (std::vector<StreamBlockState>{
                                StreamBlockState::kPresent, StreamBlockState::kMissing,
                                StreamBlockState::kPresent, StreamBlockState::kPresent}));
  EXPECT_EQ(got.asked, (std::vector<size_t>{0, 2, 3}))
      << "buffers are asked for present blocks only, in order";
  EXPECT_FALSE(got.get.headers[1]);
  const std::pair<size_t, size_t> answers[] = {{0, 0}, {2, 2}, {3, 1}};  // (position, block)
  for (const auto& [at, block] : answers) {
    ASSERT_TRUE(got.get.headers[at]) << "position " << at;
    EXPECT_EQ(got.get.headers[at]->key, blocks[block].header.key);
    EXPECT_EQ(got.get.headers[at]->checksum, blocks[block].header.checksum);
    EXPECT_EQ(got.bytes[at], blocks[block].payload) << "position " << at;
  }

  Result<Got> again = GetKeys(*client, session, {3});  // the same session and connection again
  ASSERT_TRUE(again.ok()) << again.status();
  got = std::move(*again);
  EXPECT_EQ(got.bytes[0], blocks[2].payload);
  EXPECT_EQ(server_->Stats().gets, 2u);
  EXPECT_EQ(server_->Stats().bytes_sent, 2 * kBlockBytes + 2 * 4096);
  MutexLock lock(mu_);
  EXPECT_EQ(requested_.size(), 5u);
  EXPECT_TRUE(Drained());
}

// Block 1 goes down to disk as 1.5 MiB of later blocks pass through the 1 MiB host tier:
// the keyed get reads it from there, through staging, and sends the header of what it read.
TEST_F(KeyedGetTest, ABlockOnDiskIsReadThroughStagingWithItsHeader) {
  const TestBlock first = MakeBlock(1, 256 * 1024);
  Store({first});
  for (uint64_t id = 10; id < 16; ++id) Store({MakeBlock(id, 256 * 1024)});
  ASSERT_FALSE(store_->host_pages().Pin(first.ref()).ok()) << "block 1 left host memory";
  auto client = Client();
  const Result<Got> read = GetKeys(*client, Session(), {1});
  ASSERT_TRUE(read.ok()) << read.status();
  const Got& got = *read;
  ASSERT_EQ(got.get.states[0], StreamBlockState::kPresent);
  EXPECT_EQ(got.get.headers[0]->checksum, first.header.checksum);
  EXPECT_EQ(got.bytes[0], first.payload);
  EXPECT_TRUE(Drained());
}

// A session is bound to its salt scope: another scope's session finds nothing.
TEST_F(KeyedGetTest, ASessionSeesOnlyItsSaltScope) {
  Store({MakeBlock(1, 4096)});
  auto client = Client();
  const Result<Got> read = GetKeys(*client, Session(kScope + 1), {1});
  ASSERT_TRUE(read.ok()) << read.status();
  const Got& got = *read;
  EXPECT_EQ(got.get.states[0], StreamBlockState::kMissing);
  EXPECT_TRUE(got.asked.empty());
}

TEST_F(KeyedGetTest, BadSessionsAreRefusedWithTheirReason) {
  Store({MakeBlock(1, 4096)});
  const TransferTicket session = Session();
  TransferTicket wrong = session;
  wrong.secret ^= 1;
  EXPECT_EQ(GetKeys(*Client(), wrong, {1}).status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(GetKeys(*Client(), session, {1}).ok()) << "a guess costs the owner nothing";

  const TransferTicket idle = Session();
  clock_.Advance(std::chrono::seconds(31));  // the ttl is 30 s by default
  EXPECT_EQ(GetKeys(*Client(), idle, {1}).status().code(), StatusCode::kNotFound);

  const TransferTicket put = server_->OpenPut({MakeBlock(2, 4096).header}).value();
  const Result<Got> as_session = GetKeys(*Client(), put, {1});
  EXPECT_EQ(as_session.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(as_session.status().message().find("not a session"), std::string::npos)
      << as_session.status();

  EXPECT_EQ(server_->OpenSession({.format_tag = "", .salt_scope = kScope}).status().code(),
            StatusCode::kInvalidArgument);
}

// Blocks 1 to 4 stored, 9 never. Two keyed gets sent before either reply is read come
// back in the order sent, each into its own buffers; a third send, a receive with none
// in flight and any other transfer while gets are in flight are refused and leave the
// connection working.
TEST_F(KeyedGetTest, PipelinedGetsAreAnsweredInOrder) {
  const std::vector<TestBlock> blocks{MakeBlock(1, kBlockBytes), MakeBlock(2, kBlockBytes),
                                      MakeBlock(3, kBlockBytes), MakeBlock(4, 4096)};
  Store(blocks);
  const TransferTicket session = Session();
  auto client = Client();
  ASSERT_TRUE(client->SendGetKeys(session, Keys({1, 9})).ok());
  ASSERT_TRUE(client->SendGetKeys(session, Keys({4, 3, 2})).ok());
  EXPECT_EQ(client->gets_in_flight(), 2u);
  EXPECT_EQ(client->SendGetKeys(session, Keys({1})).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(GetKeys(*client, session, {1}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(client->gets_in_flight(), 2u) << "nothing was sent for the refused calls";

  Result<Got> first = ReceiveGetKeys(*client, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->get.states, (std::vector<StreamBlockState>{StreamBlockState::kPresent,
                                                              StreamBlockState::kMissing}));
  EXPECT_EQ(first->bytes[0], blocks[0].payload);
  // One still in flight: a whole transfer now would read that get's reply as its own.
  EXPECT_EQ(GetKeys(*client, session, {1}).status().code(), StatusCode::kFailedPrecondition);
  const TestBlock put = MakeBlock(5, 4096);
  EXPECT_EQ(client->PutBlocks(session, {&put.header, 1}, {{std::span<const uint8_t>(put.payload)}})
                .status()
                .code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(client->gets_in_flight(), 1u);
  Result<Got> second = ReceiveGetKeys(*client, 3);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->asked, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(second->bytes[0], blocks[3].payload);
  EXPECT_EQ(second->bytes[1], blocks[2].payload);
  EXPECT_EQ(second->bytes[2], blocks[1].payload);
  EXPECT_EQ(second->get.headers[0]->key, blocks[3].header.key);

  EXPECT_EQ(client->gets_in_flight(), 0u);
  EXPECT_EQ(ReceiveGetKeys(*client, 1).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(client->broken());
  Result<Got> after = GetKeys(*client, session, {2});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->bytes[0], blocks[1].payload);
  EXPECT_EQ(server_->Stats().gets, 3u);
  EXPECT_TRUE(Drained());
}

// A pipelined get the node refuses (a put ticket used as a get session): its receive
// reports why, the node closes the connection, and the get sent behind it is lost, not
// answered: its receive says the connection is broken. The session itself is fine.
TEST_F(KeyedGetTest, ARefusedPipelinedGetLosesTheGetBehindIt) {
  Store({MakeBlock(1, 4096)});
  const TransferTicket session = Session();
  const TransferTicket put = server_->OpenPut({MakeBlock(2, 4096).header}).value();
  auto client = Client();
  ASSERT_TRUE(client->SendGetKeys(put, Keys({1})).ok());
  ASSERT_TRUE(client->SendGetKeys(session, Keys({1})).ok());
  EXPECT_EQ(ReceiveGetKeys(*client, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(client->broken());
  EXPECT_EQ(ReceiveGetKeys(*client, 1).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(GetKeys(*Client(), session, {1}).ok());
  EXPECT_EQ(server_->Stats().gets, 1u) << "only the last get, on a new connection, was served";
}

TEST_F(KeyedGetTest, AKeyCountOutOfRangeIsRefused) {
  const TransferTicket session = Session();
  auto client = Client();
  EXPECT_EQ(GetKeys(*client, session, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(client->broken()) << "refused before anything was sent";

  // A client that asks the node for more than kMaxStreamKeys.
  const int fd = testing::ConnectRaw(session.data_address);
  ASSERT_GE(fd, 0);
  const StreamRequest request{.op = static_cast<uint32_t>(StreamOp::kGetKeys),
                              .ticket_id = session.id,
                              .secret = session.secret};
  const StreamKeysHead head{.count = kMaxStreamKeys + 1};
  ASSERT_EQ(send(fd, &request, sizeof(request), MSG_NOSIGNAL),
            static_cast<ssize_t>(sizeof(request)));
  ASSERT_EQ(send(fd, &head, sizeof(head), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(head)));
  StreamReply reply;
  ASSERT_EQ(recv(fd, &reply, sizeof(reply), MSG_WAITALL), static_cast<ssize_t>(sizeof(reply)));
  close(fd);
  EXPECT_EQ(reply.code, static_cast<uint32_t>(StatusCode::kInvalidArgument));
  EXPECT_TRUE(GetKeys(*Client(), session, {1}).ok()) << "the session survives a malformed request";
}

}  // namespace
}  // namespace kvtier::store
