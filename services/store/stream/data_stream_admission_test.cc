// The data stream's admission of connections: only a client that shows a valid ticket or
// session may keep a connection idle.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "services/store/stream/protocol.h"
#include "services/store/stream/testing/data_stream_fixture.h"
#include "storage/testing/blocks.h"
#include "storage/testing/tiered_stores.h"
#include "tests/testing/test_util.h"

namespace kvtier::store {
namespace {

using storage::testing::MakeBlock;
using storage::testing::TestBlock;

class DataStreamAdmissionTest : public DataStreamFixture {
 protected:
  void Start(DataStreamServerOptions options) {
    StartNode(storage::testing::HostOnly(64ull << 20), options);
  }
};

// Only a client that showed a valid ticket may idle between transfers: a connection that
// sends nothing is closed at the first-request deadline, one that put a block stays open
// and puts again after three deadlines.
TEST_F(DataStreamAdmissionTest, AConnectionThatNeverShowsATicketIsClosedAProvenOneMayIdle) {
  Start({.first_request_deadline = std::chrono::milliseconds(200)});
  const int silent = testing::ConnectRaw(server_->address());
  ASSERT_GE(silent, 0);
  // Well-formed acks are requests too, but they prove nothing: they never extend it.
  const int acking = testing::ConnectRaw(server_->address());
  ASSERT_GE(acking, 0);
  auto proven = Client();
  const std::vector<TestBlock> first{MakeBlock(1, 4096)}, second{MakeBlock(2, 4096)};
  ASSERT_TRUE(proven->Put(OpenPut(first), Payloads(first)).ok());
  const StreamRequest ack{
      .op = static_cast<uint32_t>(StreamOp::kAck), .ticket_id = kStreamAcksReplies, .secret = 0};
  bool ack_refused = false;
  for (int i = 0; i < 6; ++i) {
    ack_refused |=
        send(acking, &ack, sizeof(ack), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(ack));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(ack_refused) << "a connection that only acks was still open after three deadlines";
  close(acking);
  pollfd closed{.fd = silent, .events = POLLIN, .revents = 0};
  ASSERT_EQ(poll(&closed, 1, 1000), 1) << "the silent connection was not closed";
  char byte = 0;
  EXPECT_EQ(recv(silent, &byte, 1, 0), 0) << "closed by the node, with nothing sent";
  close(silent);
  EXPECT_TRUE(proven->Put(OpenPut(second), Payloads(second)).ok())
      << "the proven connection idled and goes on";
  EXPECT_TRUE(store_->Contains(second[0].ref()));
}

}  // namespace
}  // namespace kvtier::store
