#include "services/bench/held_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace kvtier {

Result<HeldPort> HeldPort::Pick() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return UnavailableError(std::string("no socket to hold a loopback port with: ") +
                            std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const int reuse = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof(reuse)) != 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int error = errno;
    close(fd);
    return UnavailableError(std::string("no loopback port could be held: ") + std::strerror(error));
  }
  return HeldPort(fd, ntohs(addr.sin_port));
}

HeldPort::~HeldPort() {
  if (fd_ >= 0) close(fd_);
}

HeldPort::HeldPort(HeldPort&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), port_(std::exchange(other.port_, 0)) {}

HeldPort& HeldPort::operator=(HeldPort&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    port_ = std::exchange(other.port_, 0);
  }
  return *this;
}

std::string HeldPort::address() const { return "127.0.0.1:" + std::to_string(port_); }

}  // namespace kvtier
