// Fleet replay: a request trace served by N simulated inference engines that publish their
// KV events on ZMQ in an engine's own wire format, followed by a real coordinator (the
// engines configured as `coordinator.engines`), while a gateway routes every request by the
// coordinator's routing API (POST /v1/route). What `kvtier replay --engines N` runs.
//
// Each engine is a bench::SimulatedEngine of `engine_blocks` GPU blocks behind a ZMQ XPUB
// socket on loopback (frames [topic, seq (8 bytes big-endian), payload]). The gateway knows
// each engine's load as a gateway does, from what it sent: a request runs from its trace
// timestamp for output_length x decode_ms_per_token, holding its prompt's blocks, and the
// route call carries every engine's running blocks (candidate_active_blocks). For each
// request, in trace order: route (the chosen instance serves it), serve (its cache reuses what it
// holds, computes and stores the rest, evicts), publish the step's events, and wait until
// the coordinator shows them (/v1/lookup names the instance holding the whole prompt), so
// that the next route sees them: lock-step, as if events travelled instantly. The same
// requests are then served round robin by a fresh fleet, and the trace's unbounded prefix
// bound is computed from the trace alone.
//
// Blocks: each trace hash id is one block of `block_tokens` synthetic tokens
// (bench::SyntheticTokens); the index keys blocks at the same size.
//
// Thread safety: RunFleetReplay blocks its caller; progress is called on that thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/bench/trace.h"

namespace kvtier::cli {

struct FleetReplayOptions {
  uint32_t engines = 2;
  uint64_t engine_blocks = 16384;  // each engine's GPU cache
  uint32_t block_tokens = 16;
  std::string format = "vllm";  // vllm, sglang (map-form events) or trtllm
  // How long a request runs per output token; 0: the gateway sends no loads (prefix
  // affinity alone decides).
  double decode_ms_per_token = 20.0;
  double overlap_weight = 1.0;  // the coordinator's (coordinator.overlap_weight)
  std::function<void(size_t done, size_t total)> progress = {};
};

struct FleetReplayReport {
  uint32_t engines = 0;
  uint64_t engine_blocks = 0;
  std::string format;
  double decode_ms_per_token = 0.0;
  double overlap_weight = 0.0;
  uint64_t requests = 0;
  uint64_t blocks = 0;             // every request's blocks
  uint64_t routed_hit_blocks = 0;  // cached in the engine the router chose
  uint64_t round_robin_hit_blocks = 0;
  uint64_t bound_hit_blocks = 0;  // a cache that never forgets
  std::vector<uint64_t> routed_requests_per_engine;
  uint64_t events = 0;    // block events published (stored and removed blocks)
  uint64_t messages = 0;  // ZMQ messages published
  double seconds = 0.0;   // the routed replay, wall time
  double route_p50_us = 0.0, route_p99_us = 0.0;

  double routed_hit_rate() const { return Rate(routed_hit_blocks); }
  double round_robin_hit_rate() const { return Rate(round_robin_hit_blocks); }
  double bound_hit_rate() const { return Rate(bound_hit_blocks); }

 private:
  double Rate(uint64_t hits) const {
    return blocks == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(blocks);
  }
};

// kInvalidArgument: no engines, no engine blocks, an unknown format or an overlap weight
// outside [0, 1000]; kUnavailable when the
// coordinator does not follow the engines or answer the routing API in time.
[[nodiscard]] Result<FleetReplayReport> RunFleetReplay(
    std::span<const bench::TraceRequest> requests, const FleetReplayOptions& options);

std::string FleetReportJson(const FleetReplayReport& report);
std::string FleetReportText(const FleetReplayReport& report);

}  // namespace kvtier::cli
