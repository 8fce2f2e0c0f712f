#include "common/thread_cpu.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <unordered_map>

namespace kvtier {
namespace {

// The thread's CPU time from its scheduler statistics (first field: nanoseconds on a
// CPU), or from utime + stime in its stat line (clock ticks) where those are not kept.
bool ReadSeconds(const std::string& task_dir, double& seconds) {
  if (std::ifstream schedstat(task_dir + "/schedstat"); schedstat) {
    unsigned long long on_cpu_ns = 0;
    if (schedstat >> on_cpu_ns) {
      seconds = static_cast<double>(on_cpu_ns) / 1e9;
      return true;
    }
  }
  std::ifstream stat(task_dir + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  // The name (field 2) may hold spaces and parentheses: the fields after it start after
  // the last ')'. utime and stime are fields 14 and 15, the 12th and 13th after it.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int i = 0; i < 11 && rest >> field; ++i) {
  }
  unsigned long long utime = 0, stime = 0;
  if (!(rest >> utime >> stime)) return false;
  seconds = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  return true;
}

}  // namespace

Result<std::vector<ThreadCpu>> ReadThreadCpu() {
  const std::unique_ptr<DIR, int (*)(DIR*)> tasks(opendir("/proc/self/task"), closedir);
  if (tasks == nullptr) return UnavailableError("cannot read /proc/self/task");
  std::vector<ThreadCpu> threads;
  while (const dirent* entry = readdir(tasks.get())) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const std::string dir = std::string("/proc/self/task/") + entry->d_name;
    ThreadCpu thread;
    thread.tid = std::stoi(entry->d_name);
    std::ifstream comm(dir + "/comm");
    // A thread that ended while the directory was read has no files left: skipped.
    if (!std::getline(comm, thread.name) || !ReadSeconds(dir, thread.seconds)) continue;
    threads.push_back(std::move(thread));
  }
  return threads;
}

double CpuSecondsBetween(const std::vector<ThreadCpu>& before, const std::vector<ThreadCpu>& after,
                         std::string_view name_prefix) {
  std::unordered_map<int, double> earlier;
  for (const ThreadCpu& t : before) earlier[t.tid] = t.seconds;
  double total = 0;
  for (const ThreadCpu& t : after) {
    if (!t.name.starts_with(name_prefix)) continue;
    const auto it = earlier.find(t.tid);
    total += t.seconds - (it == earlier.end() ? 0 : it->second);
  }
  return total;
}

}  // namespace kvtier
