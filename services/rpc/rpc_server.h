// RpcServer: hosts one Cap'n Proto bootstrap capability on TCP and Unix-socket listeners.
//
// Every connection gets its own bootstrap capability from the factory (so per-connection
// state, such as the sequences a process holds, dies with the connection), optionally
// behind TLS. Messages larger than max_message_bytes, malformed messages and failed TLS
// handshakes close that connection only; the server keeps serving everyone else.
//
// What a client reaches before it authenticates is bounded (ConnectionLimits): a
// connection must finish its TLS handshake and authenticate within `auth_deadline`, its
// messages are at most `pre_auth_message_bytes` until then, an address may have only so
// many waiting, and the oldest waiting connection is shed for a newcomer when the server
// is at its connection limit (connection_admission.h). Failed authentications are budgeted
// per address across connections (auth_throttle.h). An accept that fails (EMFILE, ENFILE)
// sheds the oldest waiting connection, is logged and counted, and is retried with backoff:
// the listener never stops, and Readiness() reports it while it keeps failing.
//
// Thread safety: the server runs its own thread with its own KJ event loop; the factory
// and every capability it returns run only on that thread. Create(), endpoints() and
// Shutdown() may be called from any one other thread; Readiness() from any thread.
// Ownership: the server owns its listeners and connections; `metrics` outlives it.
//
// REQUIRES: the factory returns a capability of the schema the clients expect.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <capnp/capability.h>
#include <kj/async-io.h>

#include "common/config.h"
#include "common/status.h"
#include "services/rpc/connection_gate.h"
#include "services/rpc/rpc_metrics.h"

namespace kvtier::rpc {

// Bounds on what a client reaches before it authenticates (see the top of this file).
struct ConnectionLimits {
  std::chrono::milliseconds auth_deadline{5000};  // accept to authenticated, TLS handshake included
  uint64_t pre_auth_message_bytes = uint64_t{64} << 10;
  uint32_t max_connections = 0;  // 0: half of RLIMIT_NOFILE's soft limit
  uint32_t max_unauthenticated = 1024;
  uint32_t max_unauthenticated_per_address = 64;
  uint32_t auth_failure_burst = 10;       // failed tokens an address may send at once
  double auth_failures_per_second = 1.0;  // and then, at most, this often
};

// The limits a process's configuration sets (common/config.h's `connections:`).
[[nodiscard]] ConnectionLimits ConnectionLimitsFrom(const ConnectionsConfig& config);

struct RpcServerOptions {
  std::vector<std::string> listen;  // "host:port" (port 0: any free port) or "unix:/path"
  uint64_t max_message_bytes = 64ull << 20;
  std::string tls_cert_file;  // both set: every listener serves TLS only
  std::string tls_key_file;
  RpcMetrics* metrics = nullptr;  // optional
  // Called on the server's event-loop thread every tick_interval (when set): the place for
  // work that must not race the capabilities, such as the coordinator's lease expiry.
  std::function<void()> tick;
  std::chrono::milliseconds tick_interval{1000};
  // Adaptive busy polling: once a message arrives, the server's thread polls its sockets
  // without sleeping until none has arrived for this long, then sleeps again. Under steady
  // traffic that spares every call the wake-ups of a sleeping thread (several per call:
  // the call, the client's Finish, the socket turning writable), which dominate the tail
  // latency of small calls, at the price of one busy core while traffic flows. 0: off.
  std::chrono::microseconds busy_poll{0};
  std::string thread_name = "kvt-rpc";  // the event-loop thread's (common/thread_name.h)
  ConnectionLimits limits;
  // More work on the server's loop (the coordinator's HTTP API: http_listener.h): called
  // once on the loop thread before Create() returns; its promise runs until Shutdown(). An
  // error fails Create().
  std::function<Result<kj::Promise<void>>(kj::AsyncIoContext& io)> on_loop;
};

// Makes the bootstrap capability of one connection; `gate` is the connection's
// (connection_gate.h), for the capability to report authentication through.
using BootstrapFactory =
    std::function<capnp::Capability::Client(std::shared_ptr<ConnectionGate> gate)>;

class RpcServer {
 public:
  // Binds every listener before returning. kInvalidArgument for a bad address or TLS
  // file; kUnavailable when an address is in use or cannot be bound.
  [[nodiscard]] static Result<std::unique_ptr<RpcServer>> Create(RpcServerOptions options,
                                                                 BootstrapFactory factory);
  ~RpcServer();
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  // The bound addresses, with real ports: "127.0.0.1:7400", "unix:/run/kvtier.sock".
  const std::vector<std::string>& endpoints() const;
  bool tls() const;
  // Ok while the listeners accept; kUnavailable, with the error, while an accept has failed
  // within the last few seconds (descriptors exhausted). Safe from any thread.
  [[nodiscard]] Status Readiness() const;

  // Runs `fn` on the server's event-loop thread and waits until it has. From any other
  // thread, while the server runs (not after Shutdown()).
  void RunOnLoop(kj::FunctionParam<void()> fn);

  // Closes listeners and connections and joins the thread. Idempotent.
  void Shutdown();

  class Impl;

 private:
  explicit RpcServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::rpc
