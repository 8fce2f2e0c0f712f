// HeldPort: a TCP port on 127.0.0.1, held for a server that starts elsewhere (a child
// process, or a server started again where it was stopped).
//
// A port merely free a moment ago can go to another program before the server binds it;
// its clients then reach that program instead. A HeldPort keeps the port with a bound
// SO_REUSEADDR socket that never listens, from the kernel's pick until it is destroyed.
// Meanwhile no bind to port 0 and no outgoing connection gets the port, a connection to
// it is refused until a server listens there, and a server that sets SO_REUSEADDR (KJ's
// listeners, kvtier's Asio acceptors, Go's net package, Redis) can bind it and listen.
//
// Thread safety: an immutable handle; move-only. The socket is close-on-exec.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace kvtier {

class HeldPort {
 public:
  // kUnavailable when no loopback port can be bound (the error says why).
  [[nodiscard]] static Result<HeldPort> Pick();
  ~HeldPort();
  HeldPort(HeldPort&& other) noexcept;
  HeldPort& operator=(HeldPort&& other) noexcept;
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;

  uint16_t port() const { return port_; }
  std::string address() const;  // "127.0.0.1:<port>"

 private:
  HeldPort(int fd, uint16_t port) : fd_(fd), port_(port) {}
  int fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace kvtier
