#include "services/rpc/peer_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace kvtier::rpc {

std::string PeerAddress(kj::AsyncIoStream& stream) {
  sockaddr_storage addr{};
  uint length = sizeof(addr);
  if (kj::runCatchingExceptions(
          [&] { stream.getpeername(reinterpret_cast<sockaddr*>(&addr), &length); }) != nullptr) {
    return "unknown";
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, text, sizeof(text));
  } else if (addr.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr, text,
              sizeof(text));
  } else {
    return addr.ss_family == AF_UNIX ? "unix" : "unknown";
  }
  return text;
}

}  // namespace kvtier::rpc
