// AuthThrottle: a budget of failed authentications per source address, across connections.
//
// Each address has a bucket of `burst` failures that refills at `per_second`. While the
// bucket is empty, Admit() refuses to check a token from that address at all, so a client
// cannot guess tokens faster than the refill by opening connection after connection (the
// per-connection limit, session_service.h's kMaxAuthFailures, only makes it reconnect).
// A correct token from an address whose budget is spent is refused too, until the budget
// refills: the price of not telling a guesser which of its guesses would have worked.
//
// Failures are logged sampled: Failed() says when to log one line (the first failure of
// an address, then at most one per `log_interval`, with the count since the last line).
//
// At most `max_addresses` addresses are tracked; past that, buckets that have refilled are
// forgotten first (with their unlogged count), and if none has, every further address shares one
// overflow bucket, so that many addresses (an IPv6 range) cannot grow the table without bound.
//
// Thread safety: safe from any thread (one mutex, a leaf).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace kvtier::rpc {

struct AuthThrottleOptions {
  uint32_t burst = 10;      // failures an address may have before it must wait
  double per_second = 1.0;  // how fast its budget refills
  size_t max_addresses = 65536;
  std::chrono::seconds log_interval{10};
  const Clock* clock = &SystemClock::Instance();
};

class AuthThrottle {
 public:
  // REQUIRES: burst >= 1, per_second > 0, max_addresses >= 1.
  explicit AuthThrottle(AuthThrottleOptions options);

  // Ok when a token from `address` may be checked now; else kResourceExhausted naming
  // the address and how long until it may try again.
  [[nodiscard]] Status Admit(std::string_view address);

  // Records a failed check from `address`. When this failure is to be logged, returns
  // how many failures the address had since its last logged line (this one included).
  std::optional<uint64_t> Failed(std::string_view address);

  uint64_t refused() const;  // checks Admit() refused
  size_t addresses() const;  // tracked now

 private:
  struct Bucket {
    double tokens = 0;
    Nanos updated{};
    std::optional<Nanos> logged;  // when its last line was logged
    uint64_t unlogged = 0;        // failures since then
  };
  Bucket& Find(std::string_view address, Nanos now) KVTIER_REQUIRES(mu_);
  void Refill(Bucket& bucket, Nanos now) const;
  void ForgetRefilled(Nanos now) KVTIER_REQUIRES(mu_);

  const AuthThrottleOptions options_;
  mutable Mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_ KVTIER_GUARDED_BY(mu_);
  Bucket overflow_ KVTIER_GUARDED_BY(mu_);
  uint64_t refused_ KVTIER_GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::rpc
