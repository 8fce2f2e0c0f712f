#include "services/rpc/auth_throttle.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace kvtier::rpc {

AuthThrottle::AuthThrottle(AuthThrottleOptions options) : options_(options) {
  overflow_.tokens = options_.burst;
  overflow_.updated = options_.clock->Now();
}

void AuthThrottle::Refill(Bucket& bucket, Nanos now) const {
  const double seconds = std::chrono::duration<double>(now - bucket.updated).count();
  bucket.tokens = std::min<double>(options_.burst, bucket.tokens + seconds * options_.per_second);
  bucket.updated = now;
}

void AuthThrottle::ForgetRefilled(Nanos now) {
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    Refill(it->second, now);
    it = it->second.tokens >= options_.burst ? buckets_.erase(it) : std::next(it);
  }
}

AuthThrottle::Bucket& AuthThrottle::Find(std::string_view address, Nanos now) {
  if (auto it = buckets_.find(std::string(address)); it != buckets_.end()) {
    Refill(it->second, now);
    return it->second;
  }
  if (buckets_.size() >= options_.max_addresses) ForgetRefilled(now);
  if (buckets_.size() >= options_.max_addresses) {
    Refill(overflow_, now);
    return overflow_;
  }
  Bucket& bucket = buckets_[std::string(address)];
  bucket.tokens = options_.burst;
  bucket.updated = now;
  return bucket;
}

Status AuthThrottle::Admit(std::string_view address) {
  MutexLock lock(mu_);
  const Nanos now = options_.clock->Now();
  const auto it = buckets_.find(std::string(address));
  // An address with no failures on record always has its whole budget.
  Bucket* bucket = it != buckets_.end() ? &it->second : nullptr;
  if (bucket == nullptr && buckets_.size() >= options_.max_addresses) bucket = &overflow_;
  if (bucket == nullptr) return Status::Ok();
  Refill(*bucket, now);
  if (bucket->tokens >= 1) return Status::Ok();
  ++refused_;
  const double wait_s = std::ceil((1 - bucket->tokens) / options_.per_second);
  return ResourceExhaustedError("too many failed authentication attempts from " +
                                std::string(address) + "; try again in " +
                                std::to_string(static_cast<int64_t>(wait_s)) + " s");
}

std::optional<uint64_t> AuthThrottle::Failed(std::string_view address) {
  MutexLock lock(mu_);
  const Nanos now = options_.clock->Now();
  Bucket& bucket = Find(address, now);
  bucket.tokens = std::max(0.0, bucket.tokens - 1);
  ++bucket.unlogged;
  if (bucket.logged && now - *bucket.logged < options_.log_interval) return std::nullopt;
  bucket.logged = now;
  return std::exchange(bucket.unlogged, 0);
}

uint64_t AuthThrottle::refused() const {
  MutexLock lock(mu_);
  return refused_;
}

size_t AuthThrottle::addresses() const {
  MutexLock lock(mu_);
  return buckets_.size();
}

}  // namespace kvtier::rpc
