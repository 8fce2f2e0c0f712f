// PeerAddress: the address a listener's connection comes from, without its port, as the
// per-address bounds before authentication count it (auth_throttle.h,
// connection_admission.h): "10.0.0.7", "::1", "unix" for a Unix socket, "unknown" when the
// stream is not a socket.
//
// Thread safety: any thread; reads the stream's socket only.
#pragma once

#include <kj/async-io.h>

#include <string>

namespace kvtier::rpc {

[[nodiscard]] std::string PeerAddress(kj::AsyncIoStream& stream);

}  // namespace kvtier::rpc
