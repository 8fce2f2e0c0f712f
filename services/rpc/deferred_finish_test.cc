// DeferredFinish: what it holds and when it lets go, and, over a real two-party RPC
// connection, where the Finish of a held answer lands on the wire (behind the next Call).
#include "services/rpc/deferred_finish.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <capnp/rpc-twoparty.h>
#include <capnp/serialize-async.h>
#include <gtest/gtest.h>
#include <kj/async-io.h>

#include "services/rpc/schema/kvtier.capnp.h"
#include "services/rpc/testing/wire_log.h"

namespace kvtier::rpc {
namespace {

// Counts its live copies' destructions: the signal a held response gives by dying.
struct Answer {
  explicit Answer(int* dropped) : dropped(dropped) {}
  Answer(Answer&& other) noexcept : dropped(std::exchange(other.dropped, nullptr)) {}
  ~Answer() {
    if (dropped != nullptr) ++*dropped;
  }
  int* dropped;
};

TEST(DeferredFinishTest, HoldsAnswersUntilTheNextCallIsSent) {
  int dropped = 0;
  DeferredFinish deferred;
  deferred.Keep(Answer(&dropped));  // answers 1 and 2 arrive
  deferred.Keep(Answer(&dropped));
  EXPECT_EQ(dropped, 0);
  EXPECT_EQ(deferred.held(), 2u);
  deferred.CallSent();  // call 3 goes out: both are let go behind it
  EXPECT_EQ(dropped, 2);
  EXPECT_EQ(deferred.held(), 0u);
}

TEST(DeferredFinishTest, ABurstPastTheLimitIsLetGoAtOnce) {
  int dropped = 0;
  DeferredFinish deferred;
  for (size_t i = 0; i < DeferredFinish::kMaxHeld; ++i) deferred.Keep(Answer(&dropped));
  EXPECT_EQ(dropped, 0);
  deferred.Keep(Answer(&dropped));  // one more than the limit, with no call sent
  EXPECT_EQ(dropped, static_cast<int>(DeferredFinish::kMaxHeld));
  EXPECT_EQ(deferred.held(), 1u);
}

// A MessageStream that logs each outgoing Call and Finish ("call 0", "finish 0": the
// question id) before passing it on.
class RecordingStream final : public capnp::MessageStream {
 public:
  RecordingStream(capnp::MessageStream& inner, std::vector<std::string>& log)
      : inner_(inner), log_(log) {}

  kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> tryReadMessage(
      kj::ArrayPtr<kj::AutoCloseFd> fd_space, capnp::ReaderOptions options,
      kj::ArrayPtr<capnp::word> scratch) override {
    return inner_.tryReadMessage(fd_space, options, scratch);
  }
  kj::Promise<void> writeMessage(
      kj::ArrayPtr<const int> fds,
      kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) override {
    Record(segments);
    return inner_.writeMessage(fds, segments);
  }
  kj::Promise<void> writeMessages(
      kj::ArrayPtr<kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>>> messages) override {
    for (auto segments : messages) Record(segments);
    return inner_.writeMessages(messages);
  }
  kj::Maybe<int> getSendBufferSize() override { return inner_.getSendBufferSize(); }
  kj::Promise<void> end() override { return inner_.end(); }

 private:
  void Record(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) {
    const std::optional<testing::WireMessage> message = testing::ReadWireMessage(segments);
    if (!message) return;
    const bool call = message->kind == testing::WireMessage::Kind::kCall;
    log_.push_back((call ? "call " : "finish ") + std::to_string(message->question));
  }

  capnp::MessageStream& inner_;
  std::vector<std::string>& log_;
};

class EchoSession final : public schema::Session::Server {
 protected:
  kj::Promise<void> ping(PingContext context) override {
    context.getResults().setPayload(context.getParams().getPayload());
    return kj::READY_NOW;
  }
};

// A client and a server of Session::ping over a socket pair, in one event loop; the
// client's outgoing messages are logged.
struct EchoConnection {
  EchoConnection()
      : io(kj::setupAsyncIo()),
        pipe(io.provider->newTwoWayPipe()),
        server_network(*pipe.ends[1], capnp::rpc::twoparty::Side::SERVER),
        server(capnp::makeRpcServer(server_network, kj::heap<EchoSession>())),
        client_stream(*pipe.ends[0]),
        recording(client_stream, log),
        client_network(recording, capnp::rpc::twoparty::Side::CLIENT),
        client(capnp::makeRpcClient(client_network)) {
    capnp::MallocMessageBuilder message(8);
    auto vat = message.initRoot<capnp::rpc::twoparty::VatId>();
    vat.setSide(capnp::rpc::twoparty::Side::SERVER);
    session = client.bootstrap(vat).castAs<schema::Session>();
  }

  kj::AsyncIoContext io;
  kj::TwoWayPipe pipe;
  capnp::TwoPartyVatNetwork server_network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> server;
  capnp::AsyncIoMessageStream client_stream;
  std::vector<std::string> log;
  RecordingStream recording;
  capnp::TwoPartyVatNetwork client_network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> client;
  schema::Session::Client session = nullptr;
};

// KJ's objects live behind a pointer: their destructors may throw, gtest's may not.
class DeferredFinishRpcTest : public ::testing::Test {
 protected:
  // The bootstrap's own question is settled first (a ping, its answer dropped), so the
  // log holds only the test's pings.
  DeferredFinishRpcTest() : c_(std::make_unique<EchoConnection>()), log_(c_->log) {
    Ping(nullptr);
    Settle();
    log_.clear();
  }

  // Sends one ping and waits for its answer; the answer goes to `deferred`, or is dropped
  // at once without one.
  void Ping(DeferredFinish* deferred) {
    auto promise = c_->session.pingRequest().send();
    if (deferred != nullptr) deferred->CallSent();
    auto response = promise.wait(c_->io.waitScope);
    if (deferred != nullptr) deferred->Keep(kj::mv(response));
  }

  void Settle() {
    for (int i = 0; i < 10; ++i) c_->io.waitScope.poll();
  }

  std::unique_ptr<EchoConnection> c_;
  std::vector<std::string>& log_;
};

TEST_F(DeferredFinishRpcTest, ADroppedAnswersFinishGoesOutAloneBeforeTheNextCall) {
  Ping(nullptr);
  Settle();
  Ping(nullptr);
  Settle();
  // Question ids are reused once finished, so the pings may share one.
  ASSERT_EQ(log_.size(), 4u) << ::testing::PrintToString(log_);
  EXPECT_EQ(log_[0].substr(0, 5), "call ");
  EXPECT_EQ(log_[1], "finish " + log_[0].substr(5))
      << "ping 1's Finish leaves before ping 2's Call";
  EXPECT_EQ(log_[2].substr(0, 5), "call ");
  EXPECT_EQ(log_[3], "finish " + log_[2].substr(5));
}

TEST_F(DeferredFinishRpcTest, AHeldAnswersFinishFollowsTheNextCall) {
  DeferredFinish deferred;
  Ping(&deferred);
  Settle();
  ASSERT_EQ(log_.size(), 1u) << "the answer is held: no Finish yet; "
                             << ::testing::PrintToString(log_);
  const std::string first = log_[0].substr(5);
  Ping(&deferred);
  Settle();
  ASSERT_EQ(log_.size(), 3u) << ::testing::PrintToString(log_);
  EXPECT_EQ(log_[1].substr(0, 5), "call ");
  const std::string second = log_[1].substr(5);
  EXPECT_NE(second, first) << "ping 1's question is still open when ping 2 is sent";
  EXPECT_EQ(log_[2], "finish " + first) << "ping 1's Finish follows ping 2's Call";
  deferred.CallSent();  // nothing more to send: the last one is let go
  Settle();
  ASSERT_EQ(log_.size(), 4u);
  EXPECT_EQ(log_[3], "finish " + second);
}

}  // namespace
}  // namespace kvtier::rpc
