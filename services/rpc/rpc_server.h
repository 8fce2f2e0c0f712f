// RpcServer: hosts one Cap'n Proto bootstrap capability on TCP and Unix-socket listeners.
//
// Every connection gets its own bootstrap capability from the factory (so per-connection
// state, such as the sequences a process holds, dies with the connection), optionally
// behind TLS. Messages larger than max_message_bytes, malformed messages and TLS
// handshakes that fail or stall past 10 s close that connection only; the server keeps
// serving everyone else.
//
// Thread safety: the server runs its own thread with its own KJ event loop; the factory
// and every capability it returns run only on that thread. Create(), endpoints() and
// Shutdown() may be called from any one other thread.
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

#include "common/status.h"
#include "services/rpc/rpc_metrics.h"

namespace kvtier::rpc {

struct RpcServerOptions {
  std::vector<std::string> listen;   // "host:port" (port 0: any free port) or "unix:/path"
  uint64_t max_message_bytes = 64ull << 20;
  std::string tls_cert_file;         // both set: every listener serves TLS only
  std::string tls_key_file;
  RpcMetrics* metrics = nullptr;     // optional
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
};

using BootstrapFactory = std::function<capnp::Capability::Client()>;

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

  // Closes listeners and connections and joins the thread. Idempotent.
  void Shutdown();

  class Impl;

 private:
  explicit RpcServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::rpc
