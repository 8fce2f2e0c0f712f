// ListenerHealth: whether a listener's accepts are failing, for its readiness probe and
// its log.
//
// A listener records every failed accept (EMFILE, ENFILE, ENOBUFS) and keeps accepting.
// It is not ready while its last failure is younger than `memory`: a probe then says so
// with the error, and once accepts work again it is ready `memory` later. Failed() also
// samples the log: one line per `memory`, with the count of failures since the last one.
//
// Thread safety: safe from any thread (one mutex, a leaf).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace kvtier {

// `numerator`/`denominator` of this process's descriptor limit (RLIMIT_NOFILE's soft
// limit), at least 16: the default connection limits of its listeners, which leave the
// rest to its files and outgoing connections.
uint32_t DescriptorShare(uint32_t numerator, uint32_t denominator);

// Raises RLIMIT_NOFILE's soft limit to its hard limit (as Go's runtime does for every
// program), so that the shares above are of what the system allows the process, not of
// a shell's 1,024. Returns the soft limit now. Call once at the start of main.
uint64_t RaiseDescriptorLimit();

class ListenerHealth {
 public:
  explicit ListenerHealth(std::chrono::seconds memory = std::chrono::seconds(5),
                          const Clock* clock = &SystemClock::Instance())
      : memory_(memory), clock_(*clock) {}

  // Records a failed accept. When a line is to be logged now, returns how many failures
  // it reports (this one included).
  std::optional<uint64_t> Failed(std::string error);

  // Ok, or kUnavailable naming `listener` and the last error while accepts are failing.
  [[nodiscard]] Status Readiness(std::string_view listener) const;

 private:
  const Nanos memory_;
  const Clock& clock_;
  mutable Mutex mu_;
  std::optional<Nanos> failed_at_ KVTIER_GUARDED_BY(mu_);
  std::optional<Nanos> logged_at_ KVTIER_GUARDED_BY(mu_);
  uint64_t unlogged_ KVTIER_GUARDED_BY(mu_) = 0;
  std::string error_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier
