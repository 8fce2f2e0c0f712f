#include "common/listener_health.h"

#include <sys/resource.h>

#include <algorithm>
#include <utility>

namespace kvtier {

uint64_t RaiseDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur;
}

uint32_t DescriptorShare(uint32_t numerator, uint32_t denominator) {
  rlimit limit{};
  constexpr rlim_t kMost = rlim_t{1} << 20;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
    return static_cast<uint32_t>(kMost);
  return static_cast<uint32_t>(
      std::clamp<rlim_t>(limit.rlim_cur / denominator * numerator, 16, kMost));
}

std::optional<uint64_t> ListenerHealth::Failed(std::string error) {
  MutexLock lock(mu_);
  const Nanos now = clock_.Now();
  failed_at_ = now;
  error_ = std::move(error);
  ++unlogged_;
  if (logged_at_ && now - *logged_at_ < memory_) return std::nullopt;
  logged_at_ = now;
  return std::exchange(unlogged_, 0);
}

Status ListenerHealth::Readiness(std::string_view listener) const {
  MutexLock lock(mu_);
  if (!failed_at_ || clock_.Now() - *failed_at_ >= memory_) return Status::Ok();
  return UnavailableError(std::string(listener) + " cannot accept connections: " + error_);
}

}  // namespace kvtier
