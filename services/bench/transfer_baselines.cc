#include "services/bench/transfer_baselines.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "services/bench/held_port.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs `per_client(c)` on `clients` threads at once; returns when all of them have ended,
// with the time they were let go.
template <typename Fn>
Clock::time_point RunClients(uint32_t clients, Fn per_client) {
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (uint32_t c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      while (!go) std::this_thread::yield();
      per_client(c);
    });
  }
  const auto start = Clock::now();
  go = true;
  for (std::thread& t : threads) t.join();
  return start;
}

// A redis-server child, stopped (SIGTERM, then reaped) on destruction.
class RedisProcess {
 public:
  static Result<std::unique_ptr<RedisProcess>> Start(const std::string& binary) {
    // Held until Redis has stopped: Redis (SO_REUSEADDR) listens there, nothing else
    // binds it, and the probe below cannot take another program's server for Redis.
    KVTIER_ASSIGN_OR_RETURN(HeldPort held, HeldPort::Pick());
    const uint16_t port = held.port();
    const pid_t pid = fork();
    if (pid < 0) return UnavailableError("fork failed");
    if (pid == 0) {
      // A blocked signal mask survives exec: unblock all, or SIGTERM would never stop Redis.
      sigset_t none;
      sigemptyset(&none);
      pthread_sigmask(SIG_SETMASK, &none, nullptr);
      const std::string port_text = std::to_string(port);
      execlp(binary.c_str(), binary.c_str(), "--port", port_text.c_str(), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--protected-mode", "no", "--logfile", "/dev/null",
             nullptr);
      _exit(127);
    }
    auto process = std::unique_ptr<RedisProcess>(new RedisProcess(pid, std::move(held)));
    for (auto deadline = Clock::now() + std::chrono::seconds(10); Clock::now() < deadline;) {
      redisContext* probe = redisConnect("127.0.0.1", port);
      const bool up = probe != nullptr && probe->err == 0;
      redisFree(probe);
      if (up) return process;
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        process->pid_ = -1;
        return FailedPreconditionError("redis-server (" + binary +
                                       ") did not start; install it with "
                                       "scripts/install-deps.sh");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return UnavailableError("redis-server did not accept connections within 10 s");
  }
  ~RedisProcess() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  uint16_t port() const { return port_.port(); }

 private:
  RedisProcess(pid_t pid, HeldPort port) : pid_(pid), port_(std::move(port)) {}
  pid_t pid_;
  HeldPort port_;  // let go after Redis has stopped
};

}  // namespace

Result<RedisBenchResult> RunRedisBench(const BaselineOptions& o) {
  KVTIER_ASSIGN_OR_RETURN(auto redis, RedisProcess::Start(o.redis_server));
  const uint64_t blocks = o.total_bytes / o.block_bytes;
  std::vector<uint8_t> payload(o.block_bytes, 0x5A);
  std::vector<redisContext*> connections(o.clients, nullptr);
  for (auto& c : connections) {
    c = redisConnect("127.0.0.1", redis->port());
    if (c == nullptr || c->err != 0)
      return UnavailableError("cannot connect to the bench's redis-server");
  }
  std::atomic<uint64_t> failures{0};
  std::vector<std::vector<double>> get_ms(o.clients);
  auto share = [&](uint32_t c) {
    return std::pair{blocks * c / o.clients, blocks * (c + 1) / o.clients};
  };
  const auto put_start = RunClients(o.clients, [&](uint32_t c) {
    for (auto [id, end] = share(c); id < end; ++id) {
      const std::string key = "kvtier:" + std::to_string(id);
      auto* reply = static_cast<redisReply*>(redisCommand(
          connections[c], "SET %b %b", key.data(), key.size(), payload.data(), payload.size()));
      if (reply == nullptr || reply->type == REDIS_REPLY_ERROR) ++failures;
      freeReplyObject(reply);
    }
  });
  const double put_s = SecondsSince(put_start);
  const auto get_start = RunClients(o.clients, [&](uint32_t c) {
    for (auto [id, end] = share(c); id < end; ++id) {
      const std::string key = "kvtier:" + std::to_string(id);
      const auto start = Clock::now();
      auto* reply =
          static_cast<redisReply*>(redisCommand(connections[c], "GET %b", key.data(), key.size()));
      get_ms[c].push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      if (reply == nullptr || reply->type != REDIS_REPLY_STRING ||
          reply->len != static_cast<size_t>(o.block_bytes)) {
        ++failures;
      }
      freeReplyObject(reply);
    }
  });
  const double get_s = SecondsSince(get_start);
  for (redisContext* c : connections) redisFree(c);
  if (failures > 0)
    return InternalError(std::to_string(failures.load()) + " Redis commands failed");
  std::vector<double> all;
  for (const auto& v : get_ms) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  const double bytes = static_cast<double>(blocks * o.block_bytes);
  return RedisBenchResult{bytes / put_s / 1e9, bytes / get_s / 1e9,
                          all.empty() ? 0 : all[std::min(all.size() - 1, all.size() * 99 / 100)]};
}

namespace {

// `clients` connections on 127.0.0.1, each sender writing block-sized pieces of
// `source(c)` (wrapping around until its share is sent) to a reader that discards them
// into one block-sized buffer. Returns GB/s over the wall time until the readers have
// every byte (the senders end first, with the last megabytes still in the sockets).
template <typename Source>
Result<double> StreamOverLoopback(const BaselineOptions& o, Source source) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, 64) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(listener);
    return UnavailableError(std::string("loopback listener: ") + std::strerror(errno));
  }
  const uint64_t per_client = o.total_bytes / o.clients / o.block_bytes * o.block_bytes;
  std::vector<std::thread> readers;
  std::vector<int> clients(o.clients, -1);
  for (uint32_t c = 0; c < o.clients; ++c) {
    clients[c] = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(clients[c], reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) break;
    const int server_side = accept(listener, nullptr, nullptr);
    readers.emplace_back([server_side, per_client, &o] {
      std::vector<uint8_t> sink(o.block_bytes);
      for (uint64_t got = 0; got < per_client;) {
        const ssize_t n = read(server_side, sink.data(), sink.size());
        if (n <= 0) break;
        got += static_cast<uint64_t>(n);
      }
      close(server_side);
    });
  }
  close(listener);
  const auto start = RunClients(static_cast<uint32_t>(readers.size()), [&](uint32_t c) {
    const std::span<const uint8_t> bytes = source(c);
    for (uint64_t sent = 0; sent < per_client;) {
      const uint64_t at = sent % bytes.size();
      const ssize_t n =
          write(clients[c], bytes.data() + at, std::min(bytes.size() - at, per_client - sent));
      if (n <= 0) break;
      sent += static_cast<uint64_t>(n);
    }
  });
  for (std::thread& t : readers) t.join();
  const double seconds = SecondsSince(start);
  for (int fd : clients) close(fd);
  if (readers.size() != o.clients) return UnavailableError("loopback: not every client connected");
  return static_cast<double>(per_client * o.clients) / seconds / 1e9;
}

}  // namespace

Result<LoopbackBenchResult> RunLoopbackBench(const BaselineOptions& o) {
  LoopbackBenchResult result;
  const std::vector<uint8_t> one_block(o.block_bytes, 0x5A);
  KVTIER_ASSIGN_OR_RETURN(result.gbps, StreamOverLoopback(o, [&](uint32_t) {
                            return std::span<const uint8_t>(one_block);
                          }));
  // Each sender's own share of distinct blocks, written (so that its pages exist) before
  // the clock starts.
  const uint64_t per_client = o.total_bytes / o.clients / o.block_bytes * o.block_bytes;
  std::vector<std::vector<uint8_t>> shares(o.clients);
  for (uint32_t c = 0; c < o.clients; ++c)
    shares[c].assign(per_client, static_cast<uint8_t>(0x5A + c));
  KVTIER_ASSIGN_OR_RETURN(result.from_memory_gbps, StreamOverLoopback(o, [&](uint32_t c) {
                            return std::span<const uint8_t>(shares[c]);
                          }));
  return result;
}

}  // namespace kvtier::bench
