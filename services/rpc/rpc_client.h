// RpcClient: an authenticated connection to a kvtier node, usable from plain threads.
//
// Connect() opens the connection (TCP or Unix socket, plain or TLS), authenticates with
// the token and keeps the tenant session. Methods block the calling thread until the
// answer arrives or the timeout passes, and report failures as Status: the server's own
// code when it sent one (services/rpc/status_mapping.h), kUnavailable when the
// connection is gone, kDeadlineExceeded on timeout.
//
// Thread safety: every method may be called from any thread, concurrently. The client
// runs its own thread with a KJ event loop; calls are handed to it through a KJ
// executor, so the caller needs no event loop of its own.
// Ownership: destroying the client closes the connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvtier::rpc {

struct RpcClientOptions {
  std::string address;          // "host:port" or "unix:/path"
  std::string token;            // tenant token; any value when the server has auth off
  std::string act_for;          // the tenant an engine token acts for (empty: the token's own)
  std::string tls_ca_file;      // set: connect with TLS and verify against this CA
  std::string tls_server_name;  // name the certificate must carry; default: host of address
  std::chrono::milliseconds timeout{5000};  // per call, connecting included
  uint64_t max_message_bytes = 64ull << 20;
};

struct ServerVersion {
  std::string version;
  uint32_t schema_version = 0;
  std::vector<std::string> roles;
  std::string node_id;
};

struct PingReply {
  std::string payload;
  uint64_t server_time_ns = 0;
};

class RpcClient {
 public:
  // kUnauthenticated for a bad token, kUnavailable when nothing answers at the address,
  // kInvalidArgument for a bad address or CA file.
  [[nodiscard]] static Result<std::unique_ptr<RpcClient>> Connect(RpcClientOptions options);
  ~RpcClient();
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;

  const std::string& tenant() const;
  const ServerVersion& server() const;  // as reported at authentication
  // False once the connection is gone (the peer closed it, or the network failed): every
  // later call answers kUnavailable, and only a new RpcClient reaches the server again.
  bool connected() const;

  [[nodiscard]] Result<PingReply> Ping(const std::string& payload);
  [[nodiscard]] Result<ServerVersion> Version();

  // The connection's event loop, for RPC layers that make their own calls on it
  // (services/rpc/rpc_client_impl.h).
  class Impl;
  Impl& impl() { return *impl_; }

 private:
  explicit RpcClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::rpc
