// HttpListener: serves a kj::HttpService (HTTP/1.1, kj-http) on TCP listeners
// of an event loop that is already running, such as an RpcServer's
// (RpcServerOptions::on_loop), so that the service reaches that loop's state
// without a thread hop.
//
// What a client reaches before the service sees a request is bounded: a request
// head must arrive within header_timeout (8 KiB at most: kj-http's limit), an
// idle keep-alive connection closes after idle_timeout, and past
// max_connections a new connection is closed at once. With a certificate and
// key every listener serves HTTPS only. Each connection is served by the
// service HttpPeerService::ForPeer makes for its client's address, so that a
// service can budget what one address may try (its tokens: auth_throttle.h).
//
// Thread safety: Create(), Run() and the service run on the loop's thread only.
// Ownership: owns its listeners, server and service; the io context outlives
// it.
#pragma once

#include <kj/async-io.h>
#include <kj/compat/http.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvtier::rpc {

// What a listener serves: ForPeer makes the service of one connection, given its
// client's address without the port (peer_address.h).
class HttpPeerService {
 public:
  virtual ~HttpPeerService() noexcept(false) = default;
  [[nodiscard]] virtual kj::Own<kj::HttpService> ForPeer(std::string peer) = 0;
};

struct HttpListenerOptions {
  std::vector<std::string> listen;  // host:port; port 0 picks a free one
  std::string tls_cert_file = {};   // both set: HTTPS only
  std::string tls_key_file = {};
  uint32_t max_connections = 512;
  std::chrono::milliseconds header_timeout{5000};
  std::chrono::milliseconds idle_timeout{5000};
};

class HttpListener {
 public:
  // Binds every address. kInvalidArgument for a bad TLS file, kUnavailable for
  // an address that cannot be bound. `make_service` is given the header table
  // the server parses with.
  [[nodiscard]] static Result<kj::Own<HttpListener>> Create(
      kj::AsyncIoContext& io, HttpListenerOptions options,
      kj::Function<kj::Own<HttpPeerService>(kj::HttpHeaderTable::Builder&)> make_service);
  virtual ~HttpListener() noexcept(false) = default;

  // Accepts and serves until the promise is dropped.
  virtual kj::Promise<void> Run() = 0;
  // The bound addresses, with real ports.
  virtual const std::vector<std::string>& endpoints() const = 0;
};

}  // namespace kvtier::rpc
