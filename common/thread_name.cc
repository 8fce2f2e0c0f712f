#include "common/thread_name.h"

#include <pthread.h>

#include <algorithm>
#include <array>

namespace kvtier {

void NameThisThread(std::string_view name) {
  constexpr size_t kMaxName = 15;  // the kernel's TASK_COMM_LEN, less the terminator
  std::array<char, kMaxName + 1> terminated{};
  std::copy_n(name.begin(), std::min(name.size(), kMaxName), terminated.begin());
  (void)pthread_setname_np(pthread_self(), terminated.data());
}

}  // namespace kvtier
