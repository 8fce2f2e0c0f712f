// The benchmark behind `kvtier bench lookup-rpc`: Lookup latency over the RPC on loopback.
//
// Starts a coordinator node on 127.0.0.1 (its own thread, as in production), loads it with
// the blocks of a Mooncake trace through a worker's session (register, snapshot, stored
// events in batches), then sends Lookup calls for the trace's prompts on one tenant
// connection at a fixed rate: open loop, each call's latency measured from the moment it
// was scheduled to the moment its answer was processed, so a client that falls behind
// shows as latency instead of being hidden (no coordinated omission). The client thread
// polls its event loop instead of sleeping, because epoll's millisecond timeouts would add
// up to a millisecond to every measured call.
//
// Thread safety: a blocking function; uses the calling thread and the node's thread.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace kvtier::bench {

struct LookupRpcBenchOptions {
  std::vector<std::vector<uint64_t>> prompts;  // Mooncake hash_ids per request
  double rate_per_sec = 20000;
  double seconds = 5;
  uint64_t busy_poll_us = 0;  // the coordinator's coordinator.busy_poll_us
  // Ask for compact answers (a node table, one word per location), as the SDK does;
  // false: the full form (a name per location and each block's key), as older clients.
  bool compact_answers = true;
};

struct LookupRpcBenchResult {
  uint64_t calls = 0;
  uint64_t errors = 0;
  double achieved_rate = 0;
  double p50_us = 0, p90_us = 0, p99_us = 0, p999_us = 0, max_us = 0;
  uint64_t indexed_blocks = 0;
  double mean_matched_blocks = 0;
  double mean_locations = 0;     // locations per answer, over its matched blocks
  double mean_answer_bytes = 0;  // each answer's Cap'n Proto message (the results), unpacked
  // The server thread's sleeps per call (voluntary context switches of the process's other
  // threads while the calls ran): 1 when each call wakes it once, 2 when its Finish
  // wakes it again, under 1 when calls queue behind one another.
  double server_switches_per_call = 0;
  double server_cpu_us_per_call = 0;  // the server thread's CPU time (user and system) per call
};

[[nodiscard]] Result<LookupRpcBenchResult> RunLookupRpcBench(const LookupRpcBenchOptions& options);

}  // namespace kvtier::bench
