// NameThisThread: names the calling thread as `top -H`, `ps -L`, perf, gdb and
// /proc/<pid>/task/<tid>/comm show it, so that an operator (or a profile) can tell a
// node's RPC thread from its data-stream loops and its background writers.
//
// Thread safety: names only the calling thread.
// Linux keeps 15 bytes of a name: a longer one is cut there. Best effort: a name the
// kernel refuses leaves the thread's name as it was.
#pragma once

#include <string_view>

namespace kvtier {

void NameThisThread(std::string_view name);

}  // namespace kvtier
