// The benchmark behind `kvtier bench lookup-http`: the routing API's POST /v1/lookup (or
// /v1/route) latency at a fixed rate, as a gateway calls it.
//
// Starts an embedded coordinator with its routing API on 127.0.0.1 and one vLLM-format
// engine (an EnginePublisher on loopback) that stores `prompts` prompts of `tokens` tokens
// under a tenant, waits until the coordinator shows them, then posts them round robin with
// the tenant's token on `connections` keep-alive connections at `rate_per_sec`: open
// loop, each call's latency measured from the moment it was scheduled (a call waiting for
// a free connection counts its wait), so a server that falls behind shows as latency
// (no coordinated omission). The client thread polls its event loop instead of sleeping.
//
// Thread safety: a blocking function; uses the calling thread and the coordinator's.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace kvtier::cli {

struct LookupHttpBenchOptions {
  uint32_t tokens = 1024;  // per prompt
  uint32_t prompts = 64;   // distinct prompts the engine stores, posted round robin
  double rate_per_sec = 5000;
  double seconds = 10;
  uint32_t connections = 50;
  bool route = false;  // POST /v1/route instead of /v1/lookup
};

struct LookupHttpBenchResult {
  uint64_t calls = 0;   // answered 200
  uint64_t errors = 0;  // any other answer, a failed connection, or no answer in time
  double achieved_rate = 0;
  double p50_us = 0, p90_us = 0, p99_us = 0, p999_us = 0, max_us = 0;
  uint32_t matched_tokens = 0;  // the engine's prefix in the last answer
  double server_cpu_us_per_call = 0;  // the process's other threads (the coordinator's)
};

// kInvalidArgument: a zero count or a non-positive rate or duration.
[[nodiscard]] Result<LookupHttpBenchResult> RunLookupHttpBench(
    const LookupHttpBenchOptions& options);

}  // namespace kvtier::cli
