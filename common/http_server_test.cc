#include "common/http_server.h"

#include <atomic>
#include <string>

#include <gtest/gtest.h>

#include "tests/testing/test_util.h"

namespace kvtier {
namespace {

std::string Exchange(uint16_t port, const std::string& request) {
  return testing::SendRaw("127.0.0.1:" + std::to_string(port), request, std::chrono::seconds(5))
      .received;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gauge_ = *registry_.AddGauge("kvtier_test_value", "A test value.");
    gauge_->WithLabels({}).Set(42);
    MetricsHttpServerOptions options;
    options.bind_address = "127.0.0.1";
    options.port = 0;
    options.registry = &registry_;
    options.readiness = [this]() -> Status {
      return ready_ ? Status::Ok() : UnavailableError("index still rebuilding");
    };
    Result<std::unique_ptr<MetricsHttpServer>> server =
        MetricsHttpServer::Create(std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }

  std::string Get(const std::string& path) {
    return Exchange(server_->port(), "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n");
  }

  MetricsRegistry registry_;
  GaugeFamily* gauge_ = nullptr;
  std::atomic<bool> ready_{false};
  std::unique_ptr<MetricsHttpServer> server_;
};

TEST_F(HttpServerTest, ServesMetricsInTextFormat) {
  const std::string response = Get("/metrics");
  EXPECT_TRUE(response.starts_with("HTTP/1.1 200 OK\r\n")) << response;
  EXPECT_NE(response.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            std::string::npos);
  EXPECT_NE(response.find("\r\n\r\n# HELP kvtier_test_value A test value.\n"), std::string::npos);
  EXPECT_NE(response.find("kvtier_test_value 42\n"), std::string::npos);
}

TEST_F(HttpServerTest, HealthAndReadiness) {
  EXPECT_TRUE(Get("/healthz").starts_with("HTTP/1.1 200 OK")) << Get("/healthz");
  const std::string not_ready = Get("/readyz");
  EXPECT_TRUE(not_ready.starts_with("HTTP/1.1 503")) << not_ready;
  EXPECT_NE(not_ready.find("not ready: index still rebuilding"), std::string::npos);
  ready_ = true;
  EXPECT_TRUE(Get("/readyz").starts_with("HTTP/1.1 200 OK"));
  EXPECT_TRUE(Get("/metrics?name=x").starts_with("HTTP/1.1 200 OK")) << "query strings are ignored";
}

TEST_F(HttpServerTest, RefusesBadRequestsAndKeepsServing) {
  EXPECT_TRUE(Get("/nope").starts_with("HTTP/1.1 404")) << Get("/nope");
  const std::string post = Exchange(server_->port(), "POST /metrics HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(post.starts_with("HTTP/1.1 405")) << post;
  EXPECT_NE(post.find("Allow: GET, HEAD"), std::string::npos);
  EXPECT_TRUE(Exchange(server_->port(), "\x01\x02garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
  const std::string huge = "GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n";
  EXPECT_TRUE(Exchange(server_->port(), huge).starts_with("HTTP/1.1 431"));
  const std::string head = Exchange(server_->port(), "HEAD /healthz HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
  EXPECT_TRUE(head.ends_with("\r\n\r\n")) << "HEAD has no body";
  EXPECT_TRUE(Get("/healthz").starts_with("HTTP/1.1 200 OK")) << "still serving after bad input";
}

TEST_F(HttpServerTest, PortInUseIsUnavailable) {
  MetricsHttpServerOptions options;
  options.bind_address = "127.0.0.1";
  options.port = server_->port();
  options.registry = &registry_;
  Result<std::unique_ptr<MetricsHttpServer>> second = MetricsHttpServer::Create(std::move(options));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(std::to_string(server_->port())), std::string::npos);
}

TEST(HttpServerOptionsTest, BadBindAddressIsInvalidArgument) {
  MetricsRegistry registry;
  MetricsHttpServerOptions options;
  options.bind_address = "not-an-ip";
  options.registry = &registry;
  EXPECT_EQ(MetricsHttpServer::Create(std::move(options)).status().code(),
            StatusCode::kInvalidArgument);
}

// HTTPS needs a certificate and its key that load; each refusal names what was wrong.
TEST(HttpServerOptionsTest, TlsFilesThatDoNotLoadAreNamed) {
  MetricsRegistry registry;
  const auto refusal = [&](std::string cert, std::string key) {
    MetricsHttpServerOptions options;
    options.bind_address = "127.0.0.1";
    options.port = 0;
    options.registry = &registry;
    options.tls_cert_file = std::move(cert);
    options.tls_key_file = std::move(key);
    return MetricsHttpServer::Create(std::move(options)).status();
  };
  const Status missing = refusal("/nonexistent/server.pem", "/nonexistent/server.key");
  EXPECT_EQ(missing.code(), StatusCode::kInvalidArgument) << missing;
  EXPECT_NE(missing.message().find("tls.cert_file /nonexistent/server.pem"), std::string::npos)
      << missing;
  const Status half = refusal("/nonexistent/server.pem", "");
  EXPECT_EQ(half.code(), StatusCode::kInvalidArgument) << half;
  EXPECT_NE(half.message().find("both a certificate and its key"), std::string::npos) << half;
}

}  // namespace
}  // namespace kvtier
