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
#include "services/store/stream/testing/pool_source.h"
#include "storage/testing/blocks.h"
#include "storage/testing/tiered_stores.h"
#include "tests/testing/test_util.h"

namespace kvtier::store {
namespace {

using storage::testing::kScope;
using storage::testing::MakeBlock;
using storage::testing::TestBlock;
constexpr size_t kBlockBytes = 64 * 1024;

// A host tier of 1 MiB over a disk tier, behind a data stream on loopback.
class KeyedGetTest : public DataStreamFixture {
 protected:
  void SetUp() override { StartNode(storage::testing::HostOverDisk(1u << 20, dir_.path())); }
  // The node goes before its disk tier's directory (a member of this class, destroyed
  // before the fixture's).
  void TearDown() override {
    server_.reset();
    store_.reset();
  }

  TransferTicket Session(uint64_t scope = kScope,
                         std::shared_ptr<ExtraBlockSource> extra = nullptr) {
    return server_
        ->OpenSession({.format_tag = storage::testing::kFormat,
                       .salt_scope = scope,
                       .on_request =
                           [this](std::span<const BlockKey> keys) {
                             MutexLock lock(mu_);
                             requested_.insert(requested_.end(), keys.begin(), keys.end());
                           },
                       .extra = std::move(extra)})
        .value();
  }
  void Store(const std::vector<TestBlock>& blocks) {
    for (const TestBlock& b : blocks) ASSERT_TRUE(store_->Put(b.header, b.payload).ok());
  }
  static std::vector<BlockKey> Keys(const std::vector<uint64_t>& ids) {
    std::vector<BlockKey> keys;
    for (uint64_t id : ids) keys.push_back(MakeBlock(id, 1).header.key);
    return keys;
  }

  // A keyed get into buffers of their own; `asked` records which blocks buffer_for saw.
  struct Got {
    DataStreamClient::KeyedGet get;
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<size_t> asked;
  };
  static Result<Got> GetKeys(DataStreamClient& client, const TransferTicket& session,
                             const std::vector<uint64_t>& ids) {
    Got got;
    got.bytes.resize(ids.size());
    KVTIER_ASSIGN_OR_RETURN(got.get, client.GetKeys(session, Keys(ids), BuffersOf(got)));
    return got;
  }
  // The reply of the oldest pipelined get, of `keys` keys, into buffers of its own.
  static Result<Got> ReceiveGetKeys(DataStreamClient& client, size_t keys) {
    Got got;
    got.bytes.resize(keys);
    KVTIER_ASSIGN_OR_RETURN(got.get, client.ReceiveGetKeys(BuffersOf(got)));
    return got;
  }
  static DataStreamClient::BufferFor BuffersOf(Got& got) {
    return [&got](size_t i, const storage::BlockHeader& header) {
      got.asked.push_back(i);
      got.bytes[i].resize(header.payload_bytes);
      return std::span<uint8_t>(got.bytes[i]);
    };
  }

  // A keyed get of keys 5, 8, 6 and 9 from `source`, whose `pool` is blocks 5, 6 and 8 in
  // that order: the first three come with their bytes and their checksums, 9 is missing.
  void GetFiveEightSixNine(const std::shared_ptr<PoolSource>& source,
                           const std::vector<TestBlock>& pool) {
    auto client = Client();
    Result<Got> read = GetKeys(*client, Session(kScope, source), {5, 8, 6, 9});
    ASSERT_TRUE(read.ok()) << read.status();
    const Got& got = *read;
    EXPECT_EQ(got.get.states, (std::vector<StreamBlockState>{
                                  StreamBlockState::kPresent, StreamBlockState::kPresent,
                                  StreamBlockState::kPresent, StreamBlockState::kMissing}));
    const size_t order[] = {0, 2, 1};  // keys 5, 8, 6 are pool blocks 0, 2, 1
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(got.bytes[i], pool[order[i]].payload) << "key " << i;
      ASSERT_TRUE(got.get.headers[i]);
      EXPECT_EQ(got.get.headers[i]->checksum, pool[order[i]].header.checksum) << "key " << i;
    }
  }

  kvtier::testing::TempDir dir_;
  Mutex mu_;
  std::vector<BlockKey> requested_ KVTIER_GUARDED_BY(mu_);
};

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
  ASSERT_FALSE(store_->PinInHost(first.ref()).ok()) << "block 1 left host memory";
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

// The tiers hold block 1; the session's source (a worker's pool) holds another block 1
// and blocks 5, 6 (evicted before its read) and 7 (corrupt); block 9 is nowhere. The
// tiers' block 1 is sent; of the rest, the source is asked once to size them and once to
// read those it holds, and each block it read comes with its header, the checksum (which
// the source left 0, as a pool does) computed by the server from the bytes read.
TEST_F(KeyedGetTest, BlocksTheTiersLackAreReadFromTheSessionsSourceWithTheirHeaders) {
  const TestBlock tiered = MakeBlock(1, kBlockBytes);
  Store({tiered});
  const std::vector<TestBlock> pool{MakeBlock(1, 4096), MakeBlock(5, kBlockBytes),
                                    MakeBlock(6, 4096), MakeBlock(7, 4096)};
  ASSERT_NE(pool[0].payload, tiered.payload);
  auto source = std::make_shared<PoolSource>(pool, PoolSourceOptions{.gone = 6, .corrupt = 7});
  auto client = Client();
  Result<Got> read = GetKeys(*client, Session(kScope, source), {1, 5, 6, 7, 9});
  ASSERT_TRUE(read.ok()) << read.status();
  const Got& got = *read;
  EXPECT_EQ(got.get.states,
            (std::vector<StreamBlockState>{StreamBlockState::kPresent, StreamBlockState::kPresent,
                                           StreamBlockState::kMissing, StreamBlockState::kCorrupt,
                                           StreamBlockState::kMissing}));
  EXPECT_EQ(got.bytes[0], tiered.payload) << "the tiers' block comes first";
  EXPECT_EQ(got.get.headers[0]->checksum, tiered.header.checksum);
  EXPECT_EQ(got.bytes[1], pool[1].payload);
  ASSERT_TRUE(got.get.headers[1]);
  EXPECT_EQ(got.get.headers[1]->key, pool[1].header.key);
  EXPECT_EQ(got.get.headers[1]->checksum, pool[1].header.checksum)
      << "the server hashed the bytes read";
  EXPECT_FALSE(got.get.headers[2]);
  EXPECT_FALSE(got.get.headers[3]);
  EXPECT_EQ(source->hold_batches(), (std::vector<size_t>{4})) << "blocks 5, 6, 7 and 9 in one call";
  EXPECT_EQ(source->read_batches(), (std::vector<size_t>{3})) << "blocks 5, 6 and 7 in one call";
  EXPECT_EQ(server_->Stats().bytes_sent, 2 * kBlockBytes);
  EXPECT_TRUE(Drained()) << "the source's staging freed once sent";
}

// The source holds blocks 5 and 6 in place (a worker's host pool) but not block 8 (as a
// GPU pool's): the get sends 5 and 6 from the source's pages, asks the source to read
// block 8 alone, and gives both holds back once sent; every block comes with the
// checksum of its bytes.
TEST_F(KeyedGetTest, BlocksTheSourceHoldsAreSentFromItsPagesAndGivenBack) {
  const std::vector<TestBlock> pool{MakeBlock(5, kBlockBytes), MakeBlock(6, 4096),
                                    MakeBlock(8, 4096)};
  auto source = std::make_shared<PoolSource>(pool, PoolSourceOptions{.holdable = {5, 6}});
  GetFiveEightSixNine(source, pool);
  EXPECT_EQ(source->hold_batches(), (std::vector<size_t>{4}));
  EXPECT_EQ(source->read_batches(), (std::vector<size_t>{1}))
      << "block 8 alone is read by the source";
  EXPECT_TRUE(kvtier::testing::WaitUntil([&] { return source->holds_out() == 0; }));
  EXPECT_EQ(source->released(), (std::vector<uint64_t>{5, 6}));
  EXPECT_TRUE(Drained()) << "block 8's staging freed once sent";
}

// The source holds blocks 5 and 6 apart (as a GPU pool does: no host view) and stages
// them where the stream sends them from (a copier's pinned staging), but not block 8:
// the get stages 5 and 6 by one StageHeld on the stream's thread and copies neither, asks
// the source to read block 8 alone, and once sent drops the staging and gives both holds
// back with the checksums it computed.
TEST_F(KeyedGetTest, BlocksHeldApartAreSentFromTheSourcesStagingAndGivenBack) {
  const std::vector<TestBlock> pool{MakeBlock(5, kBlockBytes), MakeBlock(6, 4096),
                                    MakeBlock(8, 4096)};
  auto source =
      std::make_shared<PoolSource>(pool, PoolSourceOptions{.held_apart = {5, 6}, .stages = true});
  GetFiveEightSixNine(source, pool);
  EXPECT_EQ(source->stage_batches(), (std::vector<size_t>{2})) << "blocks 5 and 6 in one call";
  EXPECT_TRUE(source->copy_batches().empty()) << "sent from the staging, not copied";
  EXPECT_EQ(source->read_batches(), (std::vector<size_t>{1}))
      << "block 8 alone is read by the source";
  EXPECT_TRUE(kvtier::testing::WaitUntil(
      [&] { return source->holds_out() == 0 && source->staged_out() == 0; }));
  EXPECT_EQ(source->released(), (std::vector<uint64_t>{5, 6}));
  EXPECT_EQ(source->given_checksums(),
            (std::vector<uint64_t>{pool[0].header.checksum, pool[1].header.checksum}));
  EXPECT_EQ(server_->Stats().bytes_sent, kBlockBytes + 2 * 4096);
  EXPECT_TRUE(Drained()) << "block 8's staging freed once sent";
}

// The same, but the source has no staging to spare (kResourceExhausted), or stages views
// that do not match the blocks: the get copies 5 and 6 out by one CopyHeld into its own
// staging instead, and gives both holds back with the checksums it computed.
TEST_F(KeyedGetTest, BlocksHeldApartAreCopiedOutByOneCallWhereTheSourceStagesNone) {
  const std::vector<TestBlock> pool{MakeBlock(5, kBlockBytes), MakeBlock(6, 4096),
                                    MakeBlock(8, 4096)};
  auto mismatched = std::make_shared<PoolSource>(
      pool, PoolSourceOptions{.held_apart = {5, 6}, .stages = true, .stages_short = true});
  GetFiveEightSixNine(mismatched, pool);
  EXPECT_EQ(mismatched->copy_batches(), (std::vector<size_t>{2})) << "the short views are not sent";
  EXPECT_TRUE(kvtier::testing::WaitUntil([&] { return mismatched->staged_out() == 0; }));

  auto source = std::make_shared<PoolSource>(pool, PoolSourceOptions{.held_apart = {5, 6}});
  GetFiveEightSixNine(source, pool);
  EXPECT_EQ(source->stage_batches(), (std::vector<size_t>{2})) << "asked first";
  EXPECT_EQ(source->copy_batches(), (std::vector<size_t>{2})) << "blocks 5 and 6 in one copy";
  EXPECT_EQ(source->read_batches(), (std::vector<size_t>{1}))
      << "block 8 alone is read by the source";
  EXPECT_TRUE(kvtier::testing::WaitUntil([&] { return source->holds_out() == 0; }));
  EXPECT_EQ(source->released(), (std::vector<uint64_t>{5, 6}));
  EXPECT_EQ(source->given_checksums(),
            (std::vector<uint64_t>{pool[0].header.checksum, pool[1].header.checksum}));
  EXPECT_TRUE(Drained()) << "the staging freed once sent";
}

// A copy of blocks held apart that fails: lost bytes (kDataLoss) make both blocks corrupt;
// any other failure leaves them missing. Either way nothing of them is sent and both
// holds are given back.
TEST_F(KeyedGetTest, AFailedCopyOfBlocksHeldApartSendsNoneOfThem) {
  const std::vector<TestBlock> pool{MakeBlock(5, 4096), MakeBlock(6, 4096)};
  for (const Status& failure :
       {DataLossError("the device lost them"), UnavailableError("no copier")}) {
    auto source = std::make_shared<PoolSource>(
        pool, PoolSourceOptions{.held_apart = {5, 6}, .copy_fails = failure});
    auto client = Client();
    Result<Got> read = GetKeys(*client, Session(kScope, source), {5, 6});
    ASSERT_TRUE(read.ok()) << read.status();
    const StreamBlockState expected = failure.code() == StatusCode::kDataLoss
                                          ? StreamBlockState::kCorrupt
                                          : StreamBlockState::kMissing;
    EXPECT_EQ(read->get.states, (std::vector<StreamBlockState>{expected, expected})) << failure;
    EXPECT_EQ(server_->Stats().bytes_sent, 0u) << failure;
    EXPECT_TRUE(kvtier::testing::WaitUntil([&] { return source->holds_out() == 0; })) << failure;
    EXPECT_EQ(source->released(), (std::vector<uint64_t>{5, 6})) << failure;
  }
}

// The source holds block 5 and keeps the checksums its readers give back (as a pool keeps
// them while the block stays committed). The first get hashes the block's bytes and gives
// the checksum back with the hold; the second is sent with the kept checksum, hashing
// nothing (none given back).
TEST_F(KeyedGetTest, AChecksumTheSourceKeepsIsSentWithoutHashingAgain) {
  const TestBlock pooled = MakeBlock(5, kBlockBytes);
  auto source = std::make_shared<PoolSource>(
      std::vector<TestBlock>{pooled}, PoolSourceOptions{.holdable = {5}, .keeps_checksums = true});
  const TransferTicket session = Session(kScope, source);
  auto client = Client();
  for (int get = 0; get < 2; ++get) {
    const Result<Got> got = GetKeys(*client, session, {5});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->bytes[0], pooled.payload);
    EXPECT_EQ(got->get.headers[0]->checksum, pooled.header.checksum) << "get " << get;
    ASSERT_TRUE(kvtier::testing::WaitUntil([&] { return source->holds_out() == 0; }));
  }
  EXPECT_EQ(source->given_checksums(), (std::vector<uint64_t>{pooled.header.checksum, 0}));
}

// The source holds a 16 MiB block 5 (in place, or apart and staged: GetParam()), which a
// client asks for on a socket whose receive buffer is 4 KiB, and reads nothing: the
// node's send stalls mid-transfer, the block held (and its staging kept).
class StalledKeyedGetTest : public KeyedGetTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    KeyedGetTest::SetUp();
    const TransferTicket session = Session(kScope, source_);
    fd_ = testing::ConnectRaw(session.data_address, /*receive_buffer=*/4096);
    ASSERT_GE(fd_, 0);
    const StreamRequest request{.op = static_cast<uint32_t>(StreamOp::kGetKeys),
                                .ticket_id = session.id,
                                .secret = session.secret};
    const StreamKeysHead head{.count = 1};
    const BlockKey key = pooled_.header.key;
    ASSERT_EQ(send(fd_, &request, sizeof(request), MSG_NOSIGNAL),
              static_cast<ssize_t>(sizeof(request)));
    ASSERT_EQ(send(fd_, &head, sizeof(head), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(head)));
    ASSERT_EQ(send(fd_, &key, sizeof(key), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(key)));
    ASSERT_TRUE(kvtier::testing::WaitUntil([&] { return source_->hold_batches().size() == 1; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_EQ(source_->holds_out(), 1)
        << "the node is still sending: 16 MiB exceed the sockets' buffers";
    ASSERT_EQ(source_->staged_out(), GetParam() ? 1 : 0);
  }
  void TearDown() override {
    if (fd_ >= 0) close(fd_);
    KeyedGetTest::TearDown();
  }

  const TestBlock pooled_ = MakeBlock(5, 16u << 20);
  const std::shared_ptr<PoolSource> source_ =
      std::make_shared<PoolSource>(std::vector<TestBlock>{pooled_},
                                   GetParam() ? PoolSourceOptions{.held_apart = {5}, .stages = true}
                                              : PoolSourceOptions{.holdable = {5}});
  int fd_ = -1;
};

// The client closes: the node's send fails and the hold (and staging) is given back all
// the same.
TEST_P(StalledKeyedGetTest, AClientGoneMidSendLeavesNothingOfTheSourceHeld) {
  close(std::exchange(fd_, -1));
  EXPECT_TRUE(kvtier::testing::WaitUntil(
      [&] { return source_->holds_out() == 0 && source_->staged_out() == 0; }));
  EXPECT_EQ(source_->released(), std::vector<uint64_t>{5});
}

// The node shuts down, its stalled send never finished: the hold (and staging) is given
// back by the time the node is gone.
TEST_P(StalledKeyedGetTest, ANodeShutDownMidSendLeavesNothingOfTheSourceHeld) {
  server_.reset();
  EXPECT_EQ(source_->holds_out(), 0);
  EXPECT_EQ(source_->staged_out(), 0);
  EXPECT_EQ(source_->released(), std::vector<uint64_t>{5});
}

INSTANTIATE_TEST_SUITE_P(HeldInPlaceOrStaged, StalledKeyedGetTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Staged" : "InPlace"; });

// One loop, no disk tier. A get of block 5, which the source holds in place, is answered;
// giving its hold back waits, as on a busy worker loop. Meanwhile another connection of
// the same loop gets block 1 from the tiers: the hold's return did not hold the loop.
TEST_F(KeyedGetTest, AWaitingReleaseStallsNoOtherConnectionOfTheLoop) {
  StartNode(storage::testing::HostOnly(1u << 20), {.threads = 1, .tier_threads = 2});
  const TestBlock tiered = MakeBlock(1, 4096);
  Store({tiered});
  const TestBlock pooled = MakeBlock(5, 4096);
  auto source = std::make_shared<PoolSource>(
      std::vector<TestBlock>{pooled}, PoolSourceOptions{.holdable = {5}, .releases_wait = true});
  const TransferTicket session = Session(kScope, source);
  auto holding = Client();
  const Result<Got> held = GetKeys(*holding, session, {5});
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->bytes[0], pooled.payload);
  ASSERT_TRUE(source->releases().WaitForCall());
  const Result<Got> other = GetKeys(*Client(), session, {1});
  const bool still_releasing = source->releases().waiting();
  source->releases().Open();
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->bytes[0], tiered.payload);
  EXPECT_TRUE(still_releasing) << "block 1 came only once the hold was given back";
  EXPECT_TRUE(kvtier::testing::WaitUntil([&] { return source->holds_out() == 0; }));
}

// One loop (two threads for work off it) and no disk tier: nothing else takes a keyed get
// off the loop. The source's read (block 5) waits, as on a busy worker loop; meanwhile
// another connection of the same loop gets block 1 from the tiers: the read did not hold
// the loop.
TEST_F(KeyedGetTest, AWaitingSourceStallsNoOtherConnectionOfTheLoop) {
  StartNode(storage::testing::HostOnly(1u << 20), {.threads = 1, .tier_threads = 2});
  const TestBlock tiered = MakeBlock(1, 4096);
  Store({tiered});
  const TestBlock pooled = MakeBlock(5, 4096);
  auto source = std::make_shared<PoolSource>(std::vector<TestBlock>{pooled},
                                             PoolSourceOptions{.reads_wait = true});
  const TransferTicket session = Session(kScope, source);
  Result<Got> waited = InternalError("not run");
  std::thread waiting([&] {
    auto client = Client();
    waited = GetKeys(*client, session, {5});
  });
  ASSERT_TRUE(source->reads().WaitForCall());
  auto client = Client();
  const Result<Got> other = GetKeys(*client, session, {1});
  const bool source_still_reading = source->reads().waiting();
  source->reads().Open();
  waiting.join();
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->bytes[0], tiered.payload);
  EXPECT_TRUE(source_still_reading) << "block 1 came only once the source's read was over";
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(waited->bytes[0], pooled.payload);
}

// Staging bounded at 2 MiB, all of it held by an open put of 1.5 MiB (staging is taken in
// MiB). The source holds block 5 in place (a host pool's) and not block 8 (a GPU pool's):
// a keyed get of block 8 is refused kResourceExhausted, holding nothing more, while one
// of block 5, sent from the source's pages, needs no staging and is answered. Once the
// put's ticket has expired (and the idle session with it), a new session gets block 8.
TEST_F(KeyedGetTest, ASourcesUnheldBlocksBeyondTheStagingAreRefusedForALaterRetry) {
  StartNode(storage::testing::HostOnly(1u << 20), {.max_staged_bytes = 2u << 20});
  const TestBlock held = MakeBlock(5, kBlockBytes);
  const TestBlock read = MakeBlock(8, kBlockBytes);
  auto source = std::make_shared<PoolSource>(std::vector<TestBlock>{held, read},
                                             PoolSourceOptions{.holdable = {5}});
  const TransferTicket session = Session(kScope, source);
  const Result<TransferTicket> put = server_->OpenPut({MakeBlock(2, 3u << 19).header});
  ASSERT_TRUE(put.ok()) << put.status();
  const uint64_t staged = server_->Stats().staged_bytes;
  const Result<Got> refused = GetKeys(*Client(), session, {8});
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("outside the node's tiers"), std::string::npos)
      << refused.status();
  EXPECT_EQ(server_->Stats().staged_bytes, staged) << "the put's alone";
  const Result<Got> sent = GetKeys(*Client(), session, {5});
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_EQ(sent->bytes[0], held.payload);
  EXPECT_TRUE(kvtier::testing::WaitUntil([&] { return source->holds_out() == 0; }));

  clock_.Advance(std::chrono::seconds(31));  // the put's ticket expires (the ttl is 30 s)
  ASSERT_TRUE(Drained());
  const Result<Got> retried = GetKeys(*Client(), Session(kScope, source), {8});
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->bytes[0], read.payload);
}

TEST_F(KeyedGetTest, APutSessionTakesNoSource) {
  auto source = std::make_shared<PoolSource>(std::vector<TestBlock>{});
  const Result<TransferTicket> put =
      server_->OpenSession({.op = StreamOp::kPutHeaders, .extra = source});
  EXPECT_EQ(put.status().code(), StatusCode::kInvalidArgument) << put.status();
}

}  // namespace
}  // namespace kvtier::store
