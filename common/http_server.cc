#include "common/http_server.h"

#include <array>
#include <chrono>
#include <optional>
#include <string_view>
#include <thread>

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <spdlog/spdlog.h>

#include "common/thread_name.h"

namespace kvtier {
namespace {

constexpr size_t kMaxRequestHeadBytes = size_t{8} * 1024;
constexpr std::chrono::seconds kClientTimeout{10};

struct Response {
  int status = 200;
  std::string_view reason = "OK";
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

Response TextResponse(int status, std::string_view reason, std::string body) {
  Response r;
  r.status = status;
  r.reason = reason;
  r.body = std::move(body);
  return r;
}

std::string Serialize(const Response& r, bool head_only) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + std::string(r.reason) + "\r\n";
  out += "Content-Type: " + r.content_type + "\r\n";
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  if (r.status == 405) out += "Allow: GET, HEAD\r\n";
  out += "Connection: close\r\n\r\n";
  if (!head_only) out += r.body;
  return out;
}

}  // namespace

class MetricsHttpServer::Impl {
 public:
  explicit Impl(MetricsHttpServerOptions options)
      : options_(std::move(options)), acceptor_(io_), retry_(io_) {}

  bool tls() const { return tls_ != nullptr; }

  // The HTTPS context, where the options name a certificate and key.
  Status LoadTls() {
    if (options_.tls_cert_file.empty() && options_.tls_key_file.empty()) return Status::Ok();
    if (options_.tls_cert_file.empty() || options_.tls_key_file.empty()) {
      return InvalidArgumentError("metrics over TLS needs both a certificate and its key");
    }
    tls_ = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
    tls_->set_options(asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 |
                      asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
    asio::error_code ec;
    if (tls_->use_certificate_chain_file(options_.tls_cert_file, ec); ec) {
      return InvalidArgumentError("tls.cert_file " + options_.tls_cert_file + ": " + ec.message());
    }
    if (tls_->use_private_key_file(options_.tls_key_file, asio::ssl::context::pem, ec); ec) {
      return InvalidArgumentError("tls.key_file " + options_.tls_key_file + ": " + ec.message());
    }
    return Status::Ok();
  }

  Status Bind() {
    asio::error_code ec;
    const asio::ip::address address = asio::ip::make_address(options_.bind_address, ec);
    if (ec) {
      return InvalidArgumentError("metrics.bind: \"" + options_.bind_address +
                                  "\" is not an IP address");
    }
    const asio::ip::tcp::endpoint endpoint(address, options_.port);
    if (acceptor_.open(endpoint.protocol(), ec); !ec) {
      acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
      if (acceptor_.bind(endpoint, ec); !ec)
        acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    }
    if (ec) {
      return UnavailableError("cannot listen for HTTP on " + options_.bind_address + ":" +
                              std::to_string(options_.port) + ": " + ec.message());
    }
    port_ = acceptor_.local_endpoint().port();
    return Status::Ok();
  }

  void Start() {
    Accept();
    thread_ = std::thread([this] {
      NameThisThread("kvt-http");
      io_.run();
    });
  }

  void Shutdown() {
    if (!thread_.joinable()) return;
    asio::post(io_, [this] {
      asio::error_code ignored;
      acceptor_.close(ignored);
    });
    io_.stop();
    thread_.join();
  }

  uint16_t port() const { return port_; }
  const MetricsHttpServerOptions& options() const { return options_; }

 private:
  class Connection;

  void Accept();
  Response Handle(std::string_view method, std::string_view path) const;
  friend class Connection;

  MetricsHttpServerOptions options_;
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer retry_;                 // a failed accept's
  std::unique_ptr<asio::ssl::context> tls_;  // null: plain HTTP
  std::thread thread_;
  uint16_t port_ = 0;
};

// One accepted client: read the request head, answer, close.
class MetricsHttpServer::Impl::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Impl& server, asio::ip::tcp::socket socket)
      : server_(server),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        buffer_(kMaxRequestHeadBytes) {
    if (server_.tls_) tls_.emplace(socket_, *server_.tls_);
  }

  void Start() {
    auto self = shared_from_this();
    timer_.expires_after(kClientTimeout);
    timer_.async_wait([self](const asio::error_code& ec) {
      if (!ec) self->Close();  // the client was silent for too long
    });
    if (!tls_) return ReadHead();
    tls_->async_handshake(asio::ssl::stream_base::server, [self](const asio::error_code& ec) {
      if (ec) return self->Close();  // plaintext, or a failed handshake
      self->ReadHead();
    });
  }

 private:
  // Runs `op` on the connection's stream: the TLS one, else the socket.
  template <typename Op>
  void OnStream(Op&& op) {
    if (tls_) {
      op(*tls_);
    } else {
      op(socket_);
    }
  }

  void ReadHead() {
    OnStream([self = shared_from_this()](auto& stream) {
      asio::async_read_until(stream, self->buffer_, "\r\n\r\n",
                             [self](const asio::error_code& ec, size_t) { self->OnHead(ec); });
    });
  }

  void OnHead(const asio::error_code& ec) {
    if (ec == asio::error::not_found) {
      Reply(TextResponse(431, "Request Header Fields Too Large", "request head exceeds 8 KiB\n"),
            false);
      return;
    }
    if (ec) {
      Close();
      return;
    }
    const auto data = buffer_.data();
    const std::string head(asio::buffers_begin(data), asio::buffers_end(data));
    const size_t line_end = head.find("\r\n");
    const std::string_view line = std::string_view(head).substr(0, line_end);
    // Request line: METHOD SP TARGET SP HTTP/1.x
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || !line.substr(sp2 + 1).starts_with("HTTP/1.")) {
      Reply(TextResponse(400, "Bad Request", "malformed HTTP request line\n"), false);
      return;
    }
    const std::string_view method = line.substr(0, sp1);
    std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    target = target.substr(0, target.find('?'));  // scrapers may add query parameters
    Reply(server_.Handle(method, target), method == "HEAD");
  }

  void Reply(const Response& response, bool head_only) {
    auto self = shared_from_this();
    out_ = Serialize(response, head_only);
    OnStream([&](auto& stream) {
      asio::async_write(stream, asio::buffer(out_),
                        [self](const asio::error_code&, size_t) { self->Close(); });
    });
  }

  void Close() {
    asio::error_code ignored;
    timer_.cancel();
    socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  Impl& server_;
  asio::ip::tcp::socket socket_;
  std::optional<asio::ssl::stream<asio::ip::tcp::socket&>> tls_;  // over socket_, with TLS
  asio::steady_timer timer_;
  asio::streambuf buffer_;
  std::string out_;
};

void MetricsHttpServer::Impl::Accept() {
  acceptor_.async_accept([this](const asio::error_code& ec, asio::ip::tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      std::make_shared<Connection>(*this, std::move(socket))->Start();
      return Accept();
    }
    // Out of descriptors: an accept fails again at once, so wait before the next.
    retry_.expires_after(std::chrono::milliseconds(10));
    retry_.async_wait([this](const asio::error_code& wait) {
      if (!wait) Accept();
    });
  });
}

Response MetricsHttpServer::Impl::Handle(std::string_view method, std::string_view path) const {
  if (path != "/metrics" && path != "/healthz" && path != "/readyz") {
    return TextResponse(404, "Not Found", "not found; try /metrics, /healthz or /readyz\n");
  }
  if (method != "GET" && method != "HEAD") {
    return TextResponse(405, "Method Not Allowed", "only GET and HEAD are allowed\n");
  }
  if (path == "/healthz") return TextResponse(200, "OK", "ok\n");
  if (path == "/readyz") {
    const Status ready = options_.readiness ? options_.readiness() : Status::Ok();
    if (ready.ok()) return TextResponse(200, "OK", "ready\n");
    return TextResponse(503, "Service Unavailable", "not ready: " + ready.message() + "\n");
  }
  if (options_.before_scrape) options_.before_scrape();
  Response r = TextResponse(200, "OK", options_.registry->Exposition());
  r.content_type = std::string(MetricsRegistry::kContentType);
  return r;
}

Result<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Create(
    MetricsHttpServerOptions options) {
  if (options.registry == nullptr)
    return InvalidArgumentError("MetricsHttpServer needs a registry");
  auto impl = std::make_unique<Impl>(std::move(options));
  KVTIER_RETURN_IF_ERROR(impl->LoadTls());
  KVTIER_RETURN_IF_ERROR(impl->Bind());
  impl->Start();
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(impl)));
}

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricsHttpServer::~MetricsHttpServer() { Shutdown(); }
uint16_t MetricsHttpServer::port() const { return impl_->port(); }
void MetricsHttpServer::Shutdown() { impl_->Shutdown(); }

std::string MetricsHttpServer::endpoint() const {
  const std::string& bind = impl_->options().bind_address;
  const std::string host = bind == "0.0.0.0" ? "127.0.0.1" : bind;
  return std::string(impl_->tls() ? "https://" : "http://") + host + ":" + std::to_string(port());
}

}  // namespace kvtier
