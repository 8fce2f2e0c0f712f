// The client side of `kvtier bench transfer` (transfer_driver.h): one thread per client
// connects to the bench's store over Cap'n Proto (TLS when asked) and runs the put phase,
// the timed get phase and an untimed byte-for-byte pass, inline or on the data stream. The
// driver opens each phase when every client is ready for it.
//
// Thread safety: a ClientWork is its client's until that client's thread ends; Phases is
// shared (atomics).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "services/bench/rpc/transfer_driver.h"

namespace kvtier::bench {

// One client's share of the blocks, and what it measured.
struct ClientWork {
  uint32_t index = 0;
  uint64_t first_block = 0;
  uint64_t blocks = 0;
  std::vector<double> put_ms, get_ms;
  double put_open_ms = 0, get_open_ms = 0;  // the data stream's open calls, summed
  std::string error;
};

// Threads that wait for a phase sleep (atomic wait), never spin: on a small machine a
// spinning waiter takes the CPU that the server and the other clients are measured on.
// For the same reason no client starts the untimed byte-for-byte pass before every
// client has finished the timed get.
struct Phases {
  std::atomic<int> ready{0}, put_done{0}, get_done{0};
  std::atomic<bool> go_put{false}, go_get{false}, go_verify{false};

  static void Arrive(std::atomic<int>& counter) {
    ++counter;
    counter.notify_all();
  }
  static void WaitFor(std::atomic<int>& counter, int count) {
    for (int seen = counter.load(); seen < count; seen = counter.load()) counter.wait(seen);
  }
  static void Open(std::atomic<bool>& gate) {
    gate = true;
    gate.notify_all();
  }
};

// One client's payloads' checksums (before any timing), then its put phase, its timed get
// phase and the untimed get that compares every byte, each after the driver opens it.
// Failures land in work.error; the client still arrives at every phase it leaves.
void RunTransferClient(const std::string& address, const TransferBenchOptions& o, ClientWork& work,
                       Phases& phases);

}  // namespace kvtier::bench
