// Small helpers the benchmarks share: latency percentiles, and the CPU and sleeps of the
// process's other threads (a server running beside the bench's client thread).
//
// Thread safety: pure functions; OtherThreadsUsage::Now() reads the calling thread's and
// the process's usage.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace kvtier::bench {

// The q-quantile (0 <= q <= 1) of `values` by rank, which it reorders; 0 for none.
inline double Percentile(std::vector<double>& values, double q) {
  if (values.empty()) return 0;
  const size_t at = std::min(values.size() - 1, static_cast<size_t>(q * double(values.size())));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(at), values.end());
  return values[at];
}

// What every thread of the process but the calling one has used so far.
struct OtherThreadsUsage {
  int64_t voluntary_switches = 0;  // sleeps
  double cpu_seconds = 0;          // user and system

  static OtherThreadsUsage Now() {
    rusage process{}, self{};
    getrusage(RUSAGE_SELF, &process);
    getrusage(RUSAGE_THREAD, &self);
    const auto seconds = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
    };
    return {process.ru_nvcsw - self.ru_nvcsw, seconds(process.ru_utime) +
                                                  seconds(process.ru_stime) -
                                                  seconds(self.ru_utime) - seconds(self.ru_stime)};
  }
};

}  // namespace kvtier::bench
