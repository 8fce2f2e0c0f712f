// RecordingProxy: a TCP proxy on 127.0.0.1 in front of a Cap'n Proto RPC server that logs
// the Calls and Finishes its clients send, in the order it forwards them. For tests of
// what a client puts on the wire (the SDK's held answers, services/rpc/deferred_finish.h)
// against a real server, with no hook inside either.
//
// Messages are read whole (the standard framing: segment table, then segments) before
// they are forwarded, so the log's order is the order the server receives them in.
// Replies pass through untouched. Plain TCP only (no TLS).
//
// Thread safety: Log() from any thread. Ownership: the destructor closes every
// connection and joins the proxy's threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/rpc/testing/wire_log.h"

namespace kvtier::rpc::testing {

class RecordingProxy {
 public:
  // Listens on a free loopback port and forwards each connection it accepts to
  // `upstream` ("host:port").
  [[nodiscard]] static Result<std::unique_ptr<RecordingProxy>> Start(std::string upstream);
  ~RecordingProxy();

  // "127.0.0.1:port", for clients.
  std::string address() const;
  // The Calls and Finishes forwarded so far, from every connection, in order.
  std::vector<WireMessage> Log() const;

  class Impl;

 private:
  explicit RecordingProxy(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::rpc::testing
