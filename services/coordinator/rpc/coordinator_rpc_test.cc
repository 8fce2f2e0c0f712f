// The coordinator RPC skeleton over real loopback sockets: authentication, TCP and Unix
// sockets, TLS, and hostile input (garbage bytes, oversized messages, bad tokens).
#include "services/coordinator/rpc/coordinator_node.h"

#include <atomic>
#include <functional>
#include <random>

#include <capnp/ez-rpc.h>

#include <gtest/gtest.h>

#include <thread>

#include "common/version.h"
#include "services/rpc/rpc_client.h"
#include "services/rpc/schema/kvtier.capnp.h"
#include "services/rpc/session_service.h"
#include "services/rpc/status_mapping.h"
#include "tests/testing/test_util.h"

namespace kvtier::coordinator {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const std::string kToken = std::string(48, 'k');

class CoordinatorRpcTest : public ::testing::Test {
 protected:
  // Starts a node on 127.0.0.1 (free port) and a Unix socket in a temp dir.
  void StartNode(auth::TokenStore tokens, uint64_t max_message_bytes = 64ull << 20,
                 TlsConfig tls = {}) {
    CoordinatorNodeOptions options;
    options.rpc.listen = {"127.0.0.1:0"};
    options.rpc.unix_socket = dir_.File("coordinator.sock");
    options.rpc.max_message_bytes = max_message_bytes;
    options.rpc.busy_poll_us = busy_poll_us_;
    options.on_tick = on_tick_;
    options.tick_interval = tick_interval_;
    options.tls = tls;
    options.tokens = std::move(tokens);
    options.registry = &registry_;
    Result<std::unique_ptr<CoordinatorNode>> node = CoordinatorNode::Create(std::move(options));
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = std::move(node).value();
    ASSERT_EQ(node_->endpoints().size(), 2u);
  }

  static auth::TokenStore OneTenant() {
    return *auth::TokenStore::SingleTenant({"team-a", "salt-a"}, kToken);
  }
  std::string tcp() const { return node_->endpoints()[0]; }
  std::string unix_socket() const { return node_->endpoints()[1]; }

  Result<std::unique_ptr<rpc::RpcClient>> Connect(const std::string& address,
                                                  const std::string& token,
                                                  milliseconds timeout = milliseconds(3000)) {
    rpc::RpcClientOptions options;
    options.address = address;
    options.token = token;
    options.timeout = timeout;
    return rpc::RpcClient::Connect(std::move(options));
  }

  // A fresh client still gets answers: the server survived whatever came before.
  void ExpectServing() {
    Result<std::unique_ptr<rpc::RpcClient>> client = Connect(tcp(), kToken);
    ASSERT_TRUE(client.ok()) << client.status();
    Result<rpc::PingReply> pong = (*client)->Ping("still there?");
    ASSERT_TRUE(pong.ok()) << pong.status();
    EXPECT_EQ(pong->payload, "still there?");
  }

  testing::TempDir dir_;
  MetricsRegistry registry_;
  uint64_t busy_poll_us_ = 0;
  std::function<void(CoordinatorState&)> on_tick_;
  Nanos tick_interval_{0};
  std::unique_ptr<CoordinatorNode> node_;
};

TEST_F(CoordinatorRpcTest, GoodTokenPingsAndReadsVersionOverTcpAndUnixSocket) {
  StartNode(OneTenant());
  EXPECT_TRUE(tcp().starts_with("127.0.0.1:"));
  EXPECT_NE(tcp(), "127.0.0.1:0") << "the real port is reported";
  for (const std::string& address : {tcp(), unix_socket()}) {
    Result<std::unique_ptr<rpc::RpcClient>> client = Connect(address, kToken);
    ASSERT_TRUE(client.ok()) << address << ": " << client.status();
    EXPECT_EQ((*client)->tenant(), "team-a");
    Result<rpc::PingReply> pong = (*client)->Ping(std::string("\0binary\xff", 8));
    ASSERT_TRUE(pong.ok()) << pong.status();
    EXPECT_EQ(pong->payload, std::string("\0binary\xff", 8));
    EXPECT_GT(pong->server_time_ns, 0u);
    Result<rpc::ServerVersion> version = (*client)->Version();
    ASSERT_TRUE(version.ok()) << version.status();
    EXPECT_EQ(version->version, kVersion);
    EXPECT_EQ(version->schema_version, kSchemaVersion);
    EXPECT_EQ(version->roles, std::vector<std::string>{"coordinator"});
  }
  const std::string metrics = registry_.Exposition();
  EXPECT_NE(metrics.find("kvtier_rpc_requests_total{method=\"ping\",code=\"OK\"} 2"),
            std::string::npos)
      << metrics;
}

TEST_F(CoordinatorRpcTest, AClientSeesItsConnectionGoWhenTheServerStops) {
  StartNode(OneTenant());
  Result<std::unique_ptr<rpc::RpcClient>> client = Connect(tcp(), kToken);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->connected());
  node_.reset();  // the server closes every connection
  EXPECT_TRUE(testing::WaitUntil([&] { return !(*client)->connected(); }))
      << "noticed without a call of its own";
  EXPECT_EQ((*client)->Ping("anyone?").status().code(), StatusCode::kUnavailable);
}

TEST_F(CoordinatorRpcTest, ABusyPollingServerAnswersRunsItsTickAndStops) {
  // The server polls for 50 ms after each message, so a client calling every few
  // milliseconds keeps it polling the whole time; the tick (every 2 ms) must still run.
  busy_poll_us_ = 50'000;
  tick_interval_ = milliseconds(2);
  std::atomic<int> ticks{0};
  on_tick_ = [&ticks](CoordinatorState&) { ticks.fetch_add(1); };
  StartNode(OneTenant());
  Result<std::unique_ptr<rpc::RpcClient>> client = Connect(tcp(), kToken);
  ASSERT_TRUE(client.ok()) << client.status();
  const int ticks_before = ticks.load();
  const auto polling_until = std::chrono::steady_clock::now() + milliseconds(200);
  int calls = 0;
  while (std::chrono::steady_clock::now() < polling_until) {
    Result<rpc::PingReply> pong = (*client)->Ping("call " + std::to_string(calls));
    ASSERT_TRUE(pong.ok()) << pong.status();
    EXPECT_EQ(pong->payload, "call " + std::to_string(calls));
    ++calls;
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_GE(ticks.load() - ticks_before, 10) << "ticks while polling, over " << calls << " calls";

  // Quiet for longer than the window: the server sleeps, and the next call wakes it.
  std::this_thread::sleep_for(milliseconds(120));
  Result<rpc::PingReply> pong = (*client)->Ping("after a pause");
  ASSERT_TRUE(pong.ok()) << pong.status();
  EXPECT_EQ(pong->payload, "after a pause");

  // Shutdown from inside the polling window returns (the test's time limit is the check).
  ASSERT_TRUE((*client)->Ping("last").ok());
  node_->Shutdown();
  EXPECT_FALSE((*client)->Ping("gone").ok());
}

TEST_F(CoordinatorRpcTest, BadTokenGetsAClearErrorAndIsCounted) {
  StartNode(OneTenant());
  Result<std::unique_ptr<rpc::RpcClient>> client = Connect(tcp(), std::string(48, 'x'));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(client.status().message().find("invalid token"), std::string::npos) << client.status();
  EXPECT_NE(registry_.Exposition().find("kvtier_rpc_auth_failures_total 1"), std::string::npos);
  ExpectServing();
}

TEST_F(CoordinatorRpcTest, AuthDisabledAcceptsAnyTokenAsDefaultTenant) {
  StartNode(auth::TokenStore::Disabled());
  Result<std::unique_ptr<rpc::RpcClient>> client = Connect(unix_socket(), "");
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->tenant(), "default");
}

TEST_F(CoordinatorRpcTest, GarbageBytesCloseOnlyThatConnection) {
  StartNode(OneTenant());
  std::mt19937 rng(7);
  std::string garbage(64 * 1024, '\0');
  for (char& c : garbage) c = static_cast<char>(rng());
  for (const std::string& address : {tcp(), unix_socket()}) {
    const testing::RawExchange exchange = testing::SendRaw(address, garbage, seconds(5));
    ASSERT_TRUE(exchange.connected) << address;
    EXPECT_TRUE(exchange.peer_closed)
        << address << ": the server must drop a connection that sends garbage";
  }
  ExpectServing();
}

TEST_F(CoordinatorRpcTest, OversizedMessagesAreRefused) {
  StartNode(OneTenant(), /*max_message_bytes=*/16 * 1024);
  // A frame header announcing one segment of 2^28 words (2 GiB): refused before any
  // allocation, the connection closed.
  const std::string header("\x00\x00\x00\x00\x00\x00\x00\x10", 8);
  const testing::RawExchange exchange = testing::SendRaw(tcp(), header, seconds(5));
  EXPECT_TRUE(exchange.peer_closed);

  // A real call whose message exceeds the server's limit fails instead of hanging.
  Result<std::unique_ptr<rpc::RpcClient>> client = Connect(tcp(), kToken);
  ASSERT_TRUE(client.ok()) << client.status();
  Result<rpc::PingReply> pong = (*client)->Ping(std::string(32 * 1024, 'p'));
  ASSERT_FALSE(pong.ok());
  EXPECT_NE(pong.status().code(), StatusCode::kDeadlineExceeded)
      << "refused, not left hanging: " << pong.status();
  ExpectServing();
}

TEST_F(CoordinatorRpcTest, PingPayloadOverLimitIsInvalidArgument) {
  StartNode(OneTenant());
  Result<std::unique_ptr<rpc::RpcClient>> client = Connect(tcp(), kToken);
  ASSERT_TRUE(client.ok());
  Result<rpc::PingReply> pong = (*client)->Ping(std::string(100 * 1024, 'p'));
  ASSERT_FALSE(pong.ok());
  EXPECT_EQ(pong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pong.status().message().find("65536"), std::string::npos) << pong.status();
  EXPECT_TRUE((*client)->Ping("small").ok()) << "the session survives a refused call";
}

TEST_F(CoordinatorRpcTest, RepeatedBadTokensOnOneConnectionAreCutOff) {
  StartNode(OneTenant());
  // Drive the bootstrap capability directly to retry on the same connection.
  capnp::EzRpcClient client(tcp());
  auto bootstrap = client.getMain<rpc::schema::Bootstrap>();
  auto attempt = [&](const std::string& token) -> Status {
    auto request = bootstrap.authenticateRequest();
    request.setToken(token);
    Status status;
    request.send()
        .then([](auto) {}, [&](kj::Exception&& e) { status = rpc::ExceptionToStatus(e); })
        .wait(client.getWaitScope());
    return status;
  };
  for (int i = 0; i < rpc::kMaxAuthFailures; ++i) {
    EXPECT_EQ(attempt("wrong").code(), StatusCode::kUnauthenticated);
  }
  const Status after_limit = attempt(kToken);
  EXPECT_EQ(after_limit.code(), StatusCode::kUnauthenticated)
      << "even the right token, once cut off";
  EXPECT_NE(after_limit.message().find("too many failed"), std::string::npos) << after_limit;
  ExpectServing();  // a new connection starts afresh
}

class CoordinatorTlsTest : public CoordinatorRpcTest {
 protected:
  // A self-signed certificate for "localhost", made by the openssl command line.
  static std::string MakeCertificate(const testing::TempDir& dir, const std::string& name) {
    std::string output;
    const std::string command =
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1"
        " -subj /CN=localhost -addext subjectAltName=DNS:localhost"
        " -keyout " +
        dir.File(name + ".key") + " -out " + dir.File(name + ".pem");
    EXPECT_EQ(testing::RunCommand(command, &output), 0) << output;
    return dir.File(name);
  }

  Result<std::unique_ptr<rpc::RpcClient>> ConnectTls(const std::string& ca_file) {
    rpc::RpcClientOptions options;
    options.address = tcp();
    options.token = kToken;
    options.tls_ca_file = ca_file;
    options.tls_server_name = "localhost";
    options.timeout = milliseconds(3000);
    return rpc::RpcClient::Connect(std::move(options));
  }
};

TEST_F(CoordinatorTlsTest, VerifiedTlsWorksAndEverythingElseIsRefused) {
  const std::string server = MakeCertificate(dir_, "server");
  const std::string stranger = MakeCertificate(dir_, "stranger");
  StartNode(OneTenant(), 64ull << 20, TlsConfig{server + ".pem", server + ".key", ""});
  EXPECT_TRUE(node_->tls());

  Result<std::unique_ptr<rpc::RpcClient>> trusted = ConnectTls(server + ".pem");
  ASSERT_TRUE(trusted.ok()) << trusted.status();
  EXPECT_TRUE((*trusted)->Ping("over tls").ok());

  Result<std::unique_ptr<rpc::RpcClient>> wrong_ca = ConnectTls(stranger + ".pem");
  ASSERT_FALSE(wrong_ca.ok()) << "a server the client's CA did not sign must be refused";
  EXPECT_NE(wrong_ca.status().code(), StatusCode::kDeadlineExceeded) << wrong_ca.status();

  Result<std::unique_ptr<rpc::RpcClient>> plaintext = Connect(tcp(), kToken);
  ASSERT_FALSE(plaintext.ok()) << "plaintext is refused by a TLS listener";
  EXPECT_NE(plaintext.status().code(), StatusCode::kDeadlineExceeded) << plaintext.status();
}

TEST(CoordinatorTlsFilesTest, BadCertificateFilesAreNamed) {
  testing::TempDir dir;
  ASSERT_TRUE(testing::WriteFile(dir.File("bad.pem"), "not a certificate"));
  MetricsRegistry registry;
  CoordinatorNodeOptions options;
  options.rpc.listen = {"127.0.0.1:0"};
  options.tls = TlsConfig{dir.File("bad.pem"), dir.File("missing.key"), ""};
  options.registry = &registry;
  Result<std::unique_ptr<CoordinatorNode>> node = CoordinatorNode::Create(std::move(options));
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(node.status().message().find("tls.cert_file " + dir.File("bad.pem")), std::string::npos)
      << node.status();
}

TEST_F(CoordinatorRpcTest, AddressInUseIsUnavailable) {
  StartNode(OneTenant());
  CoordinatorNodeOptions options;
  options.rpc.listen = {tcp()};
  options.registry = &registry_;
  MetricsRegistry other_registry;
  options.registry = &other_registry;
  Result<std::unique_ptr<CoordinatorNode>> second = CoordinatorNode::Create(std::move(options));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(tcp()), std::string::npos) << second.status();

  CoordinatorNodeOptions same_socket;
  same_socket.rpc.listen = {};
  same_socket.rpc.unix_socket = unix_socket().substr(5);
  MetricsRegistry third_registry;
  same_socket.registry = &third_registry;
  EXPECT_EQ(CoordinatorNode::Create(std::move(same_socket)).status().code(),
            StatusCode::kUnavailable)
      << "a live server's socket is never taken over";
}

TEST_F(CoordinatorRpcTest, NothingListeningIsUnavailable) {
  const testing::ReservedPort nothing_listens;
  Result<std::unique_ptr<rpc::RpcClient>> client = Connect(nothing_listens.address(), kToken);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable) << client.status();
}

}  // namespace
}  // namespace kvtier::coordinator
