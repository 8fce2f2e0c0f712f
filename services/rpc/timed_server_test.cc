#include "services/rpc/timed_server.h"

#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <kj/async.h>

#include "services/rpc/schema/kvtier.capnp.h"
#include "services/rpc/status_mapping.h"

namespace kvtier::rpc {
namespace {

namespace schema = kvtier::rpc::schema;

// A Session whose ping answers at once, fails with the code its payload names, or waits
// for `release` when the payload is "wait"; version is left unimplemented.
class ScriptedSession final : public schema::Session::Server {
 public:
  explicit ScriptedSession(kj::Promise<void> release) : release_(release.fork()) {}

 protected:
  kj::Promise<void> ping(PingContext call) override {
    const std::string payload(reinterpret_cast<const char*>(call.getParams().getPayload().begin()),
                              call.getParams().getPayload().size());
    if (payload == "bad") ThrowStatus(InvalidArgumentError("a payload named bad"));
    if (payload == "wait") return release_.addBranch();
    return kj::READY_NOW;
  }

 private:
  kj::ForkedPromise<void> release_;
};

class TimedServerTest : public ::testing::Test {
 protected:
  void Ping(schema::Session::Client& session, const std::string& payload) {
    auto request = session.pingRequest();
    request.setPayload(
        kj::arrayPtr(reinterpret_cast<const kj::byte*>(payload.data()), payload.size()));
    kj::runCatchingExceptions([&] { request.send().wait(wait_); });
  }
  // The exposition's line for `series` (with its labels), or "" when it has none.
  std::string Line(const std::string& series) {
    const std::string text = registry_.Exposition();
    const size_t at = text.find(series + " ");
    if (at == std::string::npos) return "";
    return text.substr(at, text.find('\n', at) - at);
  }

  // Held by pointer: their destructors may throw, which a test fixture's may not.
  std::unique_ptr<kj::EventLoop> loop_ = std::make_unique<kj::EventLoop>();
  std::unique_ptr<kj::WaitScope> wait_scope_ = std::make_unique<kj::WaitScope>(*loop_);
  kj::WaitScope& wait_ = *wait_scope_;
  MetricsRegistry registry_;
  std::unique_ptr<RpcMetrics> metrics_ = RpcMetrics::Create(registry_).value();
};

TEST_F(TimedServerTest, EveryCallIsCountedByMethodAndOutcome) {
  auto release = kj::newPromiseAndFulfiller<void>();
  auto session = TimeCalls(kj::heap<ScriptedSession>(kj::mv(release.promise)),
                           capnp::Schema::from<schema::Session>(), metrics_.get())
                     .castAs<schema::Session>();
  Ping(session, "ok");
  Ping(session, "ok");
  Ping(session, "bad");
  kj::runCatchingExceptions([&] { session.versionRequest().send().wait(wait_); });
  EXPECT_EQ(Line("kvtier_rpc_requests_total{method=\"Session.ping\",code=\"OK\"}"),
            "kvtier_rpc_requests_total{method=\"Session.ping\",code=\"OK\"} 2");
  EXPECT_EQ(Line("kvtier_rpc_requests_total{method=\"Session.ping\",code=\"INVALID_ARGUMENT\"}"),
            "kvtier_rpc_requests_total{method=\"Session.ping\",code=\"INVALID_ARGUMENT\"} 1");
  EXPECT_EQ(Line("kvtier_rpc_requests_total{method=\"Session.version\",code=\"UNIMPLEMENTED\"}"),
            "kvtier_rpc_requests_total{method=\"Session.version\",code=\"UNIMPLEMENTED\"} 1");
  EXPECT_EQ(Line("kvtier_rpc_request_duration_seconds_count{method=\"Session.ping\"}"),
            "kvtier_rpc_request_duration_seconds_count{method=\"Session.ping\"} 3");
  EXPECT_EQ(Line("kvtier_rpc_requests_total{method=\"Session.coordinator\",code=\"OK\"}"), "")
      << "a method never called has no series";
}

// A call is timed to the end of its promise, not to the return of the method.
TEST_F(TimedServerTest, ACallWaitingOnAPromiseCountsWhenItEnds) {
  auto release = kj::newPromiseAndFulfiller<void>();
  auto session = TimeCalls(kj::heap<ScriptedSession>(kj::mv(release.promise)),
                           capnp::Schema::from<schema::Session>(), metrics_.get())
                     .castAs<schema::Session>();
  auto request = session.pingRequest();
  request.setPayload(kj::StringPtr("wait").asBytes());
  auto pending = request.send();
  EXPECT_FALSE(pending.poll(wait_));
  EXPECT_EQ(Line("kvtier_rpc_request_duration_seconds_count{method=\"Session.ping\"}"), "")
      << "counted before it ended";
  release.fulfiller->fulfill();
  pending.wait(wait_);
  EXPECT_EQ(Line("kvtier_rpc_requests_total{method=\"Session.ping\",code=\"OK\"}"),
            "kvtier_rpc_requests_total{method=\"Session.ping\",code=\"OK\"} 1");
}

TEST_F(TimedServerTest, WithoutMetricsTheServerAnswersUntimed) {
  auto release = kj::newPromiseAndFulfiller<void>();
  auto session = TimeCalls(kj::heap<ScriptedSession>(kj::mv(release.promise)),
                           capnp::Schema::from<schema::Session>(), nullptr)
                     .castAs<schema::Session>();
  auto request = session.pingRequest();
  request.setPayload(kj::StringPtr("ok").asBytes());
  EXPECT_TRUE(kj::runCatchingExceptions([&] { request.send().wait(wait_); }) == nullptr);
  EXPECT_EQ(Line("kvtier_rpc_request_duration_seconds_count{method=\"Session.ping\"}"), "");
}

}  // namespace
}  // namespace kvtier::rpc
