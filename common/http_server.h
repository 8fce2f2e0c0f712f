// MetricsHttpServer: the operator's HTTP endpoint of every kvtier process.
//
//   GET /metrics  200, the registry in Prometheus text format 0.0.4
//   GET /healthz  200 "ok" while the process is alive (its event loop answers)
//   GET /readyz   200 "ready" when the readiness probe says so, else 503 with its reason
//
// HEAD is answered like GET without a body; other methods get 405, other paths 404,
// malformed requests 400. Each connection serves one request and is closed
// ("Connection: close"), which every scraper and probe handles.
//
// Why not a library: the HTTP servers packaged for Debian 12 (kj-http, Boost.Beast) would
// work, but this endpoint serves three GETs; a request-line parser with hard limits is
// ~150 lines on the Asio loop the project already uses, and it bounds memory per client:
// request heads over 8 KiB and clients silent for 10 s are cut off.
//
// With a certificate and key (the node's TLS ones) it serves HTTPS only: no plaintext
// listener is left on a TLS node. A TLS handshake counts against the 10 s a client has.
//
// Thread safety: Create() starts one thread that runs the server's own asio::io_context;
// handlers run only there. The readiness probe is called on that thread. Shutdown() and
// the destructor may be called from any other thread.
// Ownership: the registry and the probe outlive the server.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "common/status.h"

namespace kvtier {

struct MetricsHttpServerOptions {
  std::string bind_address = "0.0.0.0";
  uint16_t port = 9400;  // 0: pick a free port (see port())
  const MetricsRegistry* registry = nullptr;
  // Returns OK when ready to serve; otherwise the reason given in the 503 body.
  std::function<Status()> readiness;
  // Called before each /metrics exposition, on the server's thread: where gauges that cost
  // a read to sample (the process's memory) are brought up to date. Optional.
  std::function<void()> before_scrape;
  // Both set: HTTPS only, with this certificate chain and private key (PEM files).
  std::string tls_cert_file = {};
  std::string tls_key_file = {};
};

class MetricsHttpServer {
 public:
  // Binds and starts serving. Errors: kInvalidArgument (bad address, null registry, a
  // certificate or key that does not load, naming the file), kUnavailable (address in
  // use or not bindable).
  [[nodiscard]] static Result<std::unique_ptr<MetricsHttpServer>> Create(
      MetricsHttpServerOptions options);

  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  uint16_t port() const;
  // "http://127.0.0.1:9400" style base address ("https://" with TLS).
  std::string endpoint() const;

  // Stops accepting, closes connections, joins the thread. Idempotent.
  void Shutdown();

  class Impl;

 private:
  explicit MetricsHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier
