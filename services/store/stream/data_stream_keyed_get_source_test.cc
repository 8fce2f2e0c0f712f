// Keyed gets of blocks the node's tiers lack, served from the session's source (a worker's
// pool): from its pages or its staging, given back however the send ends, never stalling
// the loop.
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
