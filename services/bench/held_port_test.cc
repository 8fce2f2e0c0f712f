// A held port: no other socket binds it or reaches a server there, but a server that sets
// SO_REUSEADDR, as KJ's listeners and kvtier's Asio acceptors do, listens on it, stops and
// listens again; dropping the hold frees the port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <optional>

#include <gtest/gtest.h>

#include "services/bench/held_port.h"

namespace kvtier {
namespace {

// Binds a fresh socket to 127.0.0.1:`port`, with SO_REUSEADDR when `reuse`; returns the
// socket, or -1 with errno set.
int BindLoopback(uint16_t port, bool reuse) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const int on = 1;
  if (reuse) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int error = errno;
    close(fd);
    errno = error;
    return -1;
  }
  return fd;
}

// A connection to 127.0.0.1:`port`; -1 when it is refused.
int ConnectLoopback(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
  close(fd);
  return -1;
}

TEST(HeldPortTest, OnlyAServerThatReusesTheAddressListensOnAHeldPort) {
  std::optional<HeldPort> held = HeldPort::Pick().value();
  ASSERT_NE(held->port(), 0);
  EXPECT_EQ(held->address(), "127.0.0.1:" + std::to_string(held->port()));
  // Nothing listens yet: a connection is refused, and a plain bind finds the port taken.
  EXPECT_EQ(ConnectLoopback(held->port()), -1);
  EXPECT_EQ(BindLoopback(held->port(), /*reuse=*/false), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  // A server that reuses the address starts there, is reached, stops and starts again.
  for (int start = 0; start < 2; ++start) {
    const int server = BindLoopback(held->port(), /*reuse=*/true);
    ASSERT_GE(server, 0) << "start " << start << ": errno " << errno;
    ASSERT_EQ(listen(server, 4), 0);
    const int client = ConnectLoopback(held->port());
    EXPECT_GE(client, 0) << "start " << start;
    if (client >= 0) close(client);
    close(server);
  }
  // Dropped, the hold frees the port for any socket.
  const uint16_t port = held->port();
  held.reset();
  const int plain = BindLoopback(port, /*reuse=*/false);
  EXPECT_GE(plain, 0) << "errno " << errno;
  if (plain >= 0) close(plain);
}

}  // namespace
}  // namespace kvtier
