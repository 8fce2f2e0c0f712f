// ConnectionGate: what one connection's Bootstrap capability and its listener share.
//
// The listener (rpc_server.h) makes one per accepted connection and hands it to the
// bootstrap factory. Until Authenticated() the connection is bounded: its messages may be
// at most ConnectionLimits::pre_auth_message_bytes, it is closed at the authentication
// deadline, and it may be shed for a newcomer (connection_admission.h). The Bootstrap
// capability asks BeforeAuthenticate() before it checks a token (the per-address budget
// of failures, auth_throttle.h) and reports the outcome.
//
// Thread safety: none; used on the listener's event-loop thread.
// Ownership: shared by the connection and its capabilities; outlives both.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace kvtier::rpc {

class ConnectionGate {
 public:
  virtual ~ConnectionGate() = default;

  // The peer's address without its port ("10.0.0.7", "::1"), or "unix".
  virtual const std::string& peer() const = 0;
  // Ok when a token from this peer may be checked now; kResourceExhausted otherwise.
  [[nodiscard]] virtual Status BeforeAuthenticate() = 0;
  virtual void AuthenticationFailed() = 0;
  // Lifts the pre-authentication bounds. Idempotent.
  virtual void Authenticated() = 0;
};

}  // namespace kvtier::rpc
