// TLS between kvtier's server (kj-tls) and client (tls_client_stream) over loopback TCP,
// with certificates made by the openssl command line: names and IP addresses, the
// refusals, and bytes through both directions at once.
#include "services/rpc/tls.h"

#include <gtest/gtest.h>
#include <kj/async-io.h>

#include <string>
#include <vector>

#include "services/rpc/status_mapping.h"
#include "tests/testing/test_util.h"

namespace kvtier::rpc {
namespace {

// Echoes what it reads until the client closes.
struct Echo {
  explicit Echo(kj::Own<kj::AsyncIoStream> s) : stream(kj::mv(s)) {}
  kj::Promise<void> Run() {
    return stream->tryRead(buffer.begin(), 1, buffer.size())
        .then([this](size_t n) -> kj::Promise<void> {
          if (n == 0) return kj::READY_NOW;
          return stream->write(buffer.begin(), n).then([this] { return Run(); });
        });
  }
  kj::Own<kj::AsyncIoStream> stream;
  kj::Array<kj::byte> buffer = kj::heapArray<kj::byte>(1 << 16);
};

// The event loop and everything on it (kj's destructors may throw, gtest's may not).
struct Loop final : kj::TaskSet::ErrorHandler {
  void taskFailed(kj::Exception&&) override {}  // a refused handshake ends its connection only
  kj::AsyncIoContext io = kj::setupAsyncIo();
  std::unique_ptr<TlsServer> server;
  std::unique_ptr<TlsClient> client;
  kj::Own<kj::ConnectionReceiver> listener;
  kj::TaskSet tasks{*this};
};

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A CA, and a server certificate it signs for DNS kvtier.test and IP 127.0.0.1.
    ASSERT_EQ(testing::MakeTestCertificates(dir_.path()), "");
    Result<std::unique_ptr<TlsServer>> server =
        TlsServer::Create(dir_.File("server.pem"), dir_.File("server.key"));
    ASSERT_TRUE(server.ok()) << server.status();
    loop_->server = std::move(*server);
    loop_->listener =
        io().provider->getNetwork().parseAddress("127.0.0.1", 0).wait(io().waitScope)->listen();
    Accept();
  }

  void Accept() {
    loop_->tasks.add(loop_->listener->accept().then([this](kj::Own<kj::AsyncIoStream> stream) {
      Accept();
      return loop_->server->Wrap(kj::mv(stream)).then([](kj::Own<kj::AsyncIoStream> tls) {
        auto echo = kj::heap<Echo>(kj::mv(tls));
        auto done = echo->Run();
        return done.attach(kj::mv(echo));
      });
    }));
  }
  kj::AsyncIoContext& io() { return loop_->io; }

  // A verified connection to the echo server expecting `server_name`, or the exception.
  // `failed`: how the connect failed, as the RPC client reports it.
  kj::Own<kj::AsyncIoStream> Connect(const std::string& ca, const std::string& server_name,
                                     Status* failed) {
    Result<std::unique_ptr<TlsClient>> client = TlsClient::Create(dir_.File(ca));
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return kj::Own<kj::AsyncIoStream>();
    loop_->client = std::move(*client);
    auto address = io().provider->getNetwork()
                       .parseAddress("127.0.0.1", loop_->listener->getPort())
                       .wait(io().waitScope);
    kj::Own<kj::AsyncIoStream> connected;
    KJ_IF_MAYBE (exception, kj::runCatchingExceptions([&] {
                   connected =
                       loop_->client->Wrap(address->connect().wait(io().waitScope), server_name)
                           .wait(io().waitScope);
                 })) {
      *failed = ExceptionToStatus(*exception);
    }
    return connected;
  }

  testing::TempDir dir_;
  std::unique_ptr<Loop> loop_ = std::make_unique<Loop>();
};

TEST_F(TlsTest, TheServerIsVerifiedByItsDnsNameOrItsIpAddress) {
  for (const std::string name : {"kvtier.test", "127.0.0.1"}) {
    Status failed;
    kj::Own<kj::AsyncIoStream> stream = Connect("ca.pem", name, &failed);
    ASSERT_TRUE(stream.get() != nullptr) << name << ": " << failed;
    std::vector<kj::byte> sent(3 << 20);
    for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<kj::byte>(i * 31 + i / 4096);
    // Two pieces in one write, read back while they are still being written.
    const kj::ArrayPtr<const kj::byte> pieces[] = {
        kj::arrayPtr(sent.data(), 1000), kj::arrayPtr(sent.data() + 1000, sent.size() - 1000)};
    std::vector<kj::byte> echoed(sent.size());
    auto written = stream->write(kj::arrayPtr(pieces, 2));
    auto read = stream->read(echoed.data(), echoed.size());
    written.wait(io().waitScope);
    read.wait(io().waitScope);
    EXPECT_EQ(echoed, sent) << name;
    // Closing our end makes the server close its own: the read sees the end of the stream.
    stream->shutdownWrite();
    kj::byte more;
    EXPECT_EQ(stream->tryRead(&more, 1, 1).wait(io().waitScope), 0u) << name;
  }
}

// A certificate that does not verify is UNAUTHENTICATED, which is not retried: the cause
// is configuration, not the network.
TEST_F(TlsTest, AnotherNameOrAddressIsRefused) {
  Status failed;
  EXPECT_TRUE(Connect("ca.pem", "someone-else.test", &failed).get() == nullptr);
  EXPECT_EQ(failed.code(), StatusCode::kUnauthenticated) << failed;
  EXPECT_NE(failed.message().find("hostname mismatch"), std::string::npos) << failed;
  EXPECT_EQ(failed.retry_advice(), RetryAdvice::kNever) << failed;
  EXPECT_TRUE(Connect("ca.pem", "127.0.0.2", &failed).get() == nullptr);
  EXPECT_EQ(failed.code(), StatusCode::kUnauthenticated) << failed;
  EXPECT_NE(failed.message().find("IP address mismatch"), std::string::npos) << failed;
  EXPECT_TRUE(Connect("ca.pem", "", &failed).get() == nullptr);
  EXPECT_EQ(failed.code(), StatusCode::kInvalidArgument) << failed;
  EXPECT_NE(failed.message().find("name"), std::string::npos) << failed;
}

TEST_F(TlsTest, AServerTheCaDidNotSignIsRefused) {
  Status failed;
  EXPECT_TRUE(Connect("stranger.pem", "kvtier.test", &failed).get() == nullptr);
  EXPECT_EQ(failed.code(), StatusCode::kUnauthenticated) << failed;
  EXPECT_NE(failed.message().find("not trusted"), std::string::npos) << failed;
}

TEST_F(TlsTest, ACaFileWithoutACertificateIsNamed) {
  ASSERT_TRUE(testing::WriteFile(dir_.File("empty.pem"), "not a certificate\n"));
  Result<std::unique_ptr<TlsClient>> client = TlsClient::Create(dir_.File("empty.pem"));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(client.status().message().find("tls.ca_file " + dir_.File("empty.pem")),
            std::string::npos)
      << client.status();
  EXPECT_EQ(TlsClient::Create(dir_.File("missing.pem")).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::rpc
