#include "services/rpc/testing/recording_proxy.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <kj/array.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace kvtier::rpc::testing {
namespace {

// Largest message the proxy reads whole; anything larger ends the connection.
constexpr size_t kMaxSegments = 512;
constexpr size_t kMaxMessageWords = 64u << 20 >> 3;

bool ReadExact(int fd, void* data, size_t size) {
  auto* at = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, at, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool WriteExact(int fd, const void* data, size_t size) {
  const auto* at = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, at, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

Result<int> ConnectTo(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos)
    return InvalidArgumentError("upstream \"" + address + "\" names no port");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(address.substr(0, colon).c_str(), address.substr(colon + 1).c_str(), &hints,
                    &found) != 0) {
    return UnavailableError("cannot resolve upstream \"" + address + "\"");
  }
  int fd = -1;
  for (addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd >= 0 && ::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) return UnavailableError("cannot connect to upstream \"" + address + "\"");
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

class RecordingProxy::Impl {
 public:
  Impl(int listener, std::string upstream) : listener_(listener), upstream_(std::move(upstream)) {
    sockaddr_in bound{};
    socklen_t length = sizeof(bound);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&bound), &length);
    address_ = "127.0.0.1:" + std::to_string(ntohs(bound.sin_port));
    acceptor_ = std::thread([this] { Accept(); });
  }

  ~Impl() {
    ::shutdown(listener_, SHUT_RDWR);  // wakes accept()
    acceptor_.join();
    ::close(listener_);
    std::vector<std::thread> pumps;
    {
      MutexLock lock(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);  // wakes every pump's read
      pumps = std::move(pumps_);
    }
    for (std::thread& pump : pumps) pump.join();
    MutexLock lock(mu_);
    for (int fd : fds_) ::close(fd);
  }

  const std::string& address() const { return address_; }

  std::vector<WireMessage> Log() const {
    MutexLock lock(mu_);
    return log_;
  }

 private:
  void Accept() {
    for (;;) {
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      Result<int> server = ConnectTo(upstream_);
      MutexLock lock(mu_);
      fds_.push_back(client);
      if (!server.ok()) continue;  // the client sees its connection closed at the end
      fds_.push_back(*server);
      pumps_.emplace_back([this, client, server = *server] { ForwardMessages(client, server); });
      pumps_.emplace_back([client, server = *server] { ForwardBytes(server, client); });
    }
  }

  // Client to server, a whole message at a time, logged before it is forwarded.
  void ForwardMessages(int from, int to) {
    std::vector<uint32_t> table;
    kj::Array<capnp::word> words;
    for (;;) {
      uint32_t count_minus_one = 0;
      if (!ReadExact(from, &count_minus_one, sizeof(count_minus_one))) break;
      const size_t count = size_t{count_minus_one} + 1;
      if (count > kMaxSegments) break;
      table.assign(count + (count % 2 == 0 ? 1 : 0), 0);  // sizes, padded to a word
      if (!ReadExact(from, table.data(), table.size() * 4)) break;
      size_t total = 0;
      for (size_t i = 0; i < count; ++i) total += table[i];
      if (total > kMaxMessageWords) break;
      if (words.size() < total)
        words = kj::heapArray<capnp::word>(total);  // capnp::word cannot be moved: no vector
      if (!ReadExact(from, words.begin(), total * sizeof(capnp::word))) break;
      std::vector<kj::ArrayPtr<const capnp::word>> segments;
      for (size_t i = 0, at = 0; i < count; at += table[i], ++i)
        segments.emplace_back(words.begin() + at, table[i]);
      if (auto message = ReadWireMessage(kj::arrayPtr(segments.data(), segments.size()))) {
        MutexLock lock(mu_);
        log_.push_back(std::move(*message));
      }
      if (!WriteExact(to, &count_minus_one, sizeof(count_minus_one)) ||
          !WriteExact(to, table.data(), table.size() * 4) ||
          !WriteExact(to, words.begin(), total * sizeof(capnp::word))) {
        break;
      }
    }
    ::shutdown(to, SHUT_WR);
  }

  static void ForwardBytes(int from, int to) {
    char buffer[64 * 1024];
    for (;;) {
      const ssize_t n = ::read(from, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || !WriteExact(to, buffer, static_cast<size_t>(n))) break;
    }
    ::shutdown(to, SHUT_WR);
  }

  const int listener_;
  const std::string upstream_;
  std::string address_;
  std::thread acceptor_;
  mutable Mutex mu_;
  std::vector<int> fds_ KVTIER_GUARDED_BY(mu_);  // closed when the proxy stops
  std::vector<std::thread> pumps_ KVTIER_GUARDED_BY(mu_);
  std::vector<WireMessage> log_ KVTIER_GUARDED_BY(mu_);
};

Result<std::unique_ptr<RecordingProxy>> RecordingProxy::Start(std::string upstream) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) return UnavailableError(std::string("socket: ") + std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(listener, 16) != 0) {
    const std::string error = std::strerror(errno);
    ::close(listener);
    return UnavailableError("cannot listen on 127.0.0.1: " + error);
  }
  return std::unique_ptr<RecordingProxy>(
      new RecordingProxy(std::make_unique<Impl>(listener, std::move(upstream))));
}

RecordingProxy::RecordingProxy(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RecordingProxy::~RecordingProxy() = default;
std::string RecordingProxy::address() const { return impl_->address(); }
std::vector<WireMessage> RecordingProxy::Log() const { return impl_->Log(); }

}  // namespace kvtier::rpc::testing
