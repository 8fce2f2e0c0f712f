// The baselines of `kvtier bench transfer`, measured in the same run as the store:
//
//   Redis     a redis-server started here (127.0.0.1, a free port, persistence off; the
//             remote backend LMCache users run), `clients` connections through hiredis,
//             one SET per block, then one GET per block (length checked). Stopped after.
//   loopback  `clients` raw TCP connections on 127.0.0.1, each streaming its share of the
//             bytes in block-sized writes to a reader that discards them into one
//             block-sized buffer: the ceiling. Measured twice: from one block sent over
//             and over (cache-resident: the ceiling the goals are stated against), and
//             from distinct blocks in memory, as many bytes as the store holds (what a
//             raw stream of the store's blocks costs when none of them is in a cache).
//
// Thread safety: functions of their inputs; each starts and stops its own threads.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace kvtier::bench {

struct BaselineOptions {
  uint64_t block_bytes = uint64_t{256} * 1024;
  uint32_t clients = 8;
  uint64_t total_bytes = 256ull << 20;
  std::string redis_server = "redis-server";  // the binary, looked up in PATH
};

struct RedisBenchResult {
  double put_gbps = 0;
  double get_gbps = 0;
  double get_p99_ms = 0;
};

struct LoopbackBenchResult {
  double gbps = 0;              // one cache-resident block, resent
  double from_memory_gbps = 0;  // distinct blocks, none in a cache
};

// kFailedPrecondition when redis-server cannot be started (not installed: run
// scripts/install-deps.sh).
[[nodiscard]] Result<RedisBenchResult> RunRedisBench(const BaselineOptions& options);
[[nodiscard]] Result<LoopbackBenchResult> RunLoopbackBench(const BaselineOptions& options);

}  // namespace kvtier::bench
