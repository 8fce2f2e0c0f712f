// Thread CPU times: how much CPU each thread of this process has used so far, with the
// name it gave itself (NameThisThread), read from /proc/self/task. Benchmarks take a
// sample before and after a phase to say where its CPU went: a server's RPC thread, its
// data-stream loops, or the clients (`kvtier bench transfer`).
//
// Thread safety: reads only the process's own state; safe from any thread.
// Resolution: nanoseconds where the kernel keeps scheduler statistics
// (/proc/.../schedstat), else its clock ticks (usually 10 ms).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvtier {

struct ThreadCpu {
  int tid = 0;
  std::string name;
  double seconds = 0;  // CPU time used since the thread started
};

// Every live thread of this process. kUnavailable when /proc/self/task cannot be read.
[[nodiscard]] Result<std::vector<ThreadCpu>> ReadThreadCpu();

// CPU seconds that the threads whose names start with `name_prefix` used between two
// samples of this process. A thread in `after` only started in between (all its time
// counts); a thread only in `before` ended in between (its last part is not seen).
double CpuSecondsBetween(const std::vector<ThreadCpu>& before, const std::vector<ThreadCpu>& after,
                         std::string_view name_prefix);

}  // namespace kvtier
