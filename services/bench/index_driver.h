// The coordinator index benchmark behind `kvtier bench index`.
//
// Replays a Mooncake trace through one BlockIndex on one thread, as the coordinator of a
// cluster of `workers` GPU workers would see it. For each request:
//   1. Lookup of the prompt's block keys (timed on its own for the latency percentiles);
//   2. Route (coordinator/index/routing.h): the cheapest worker, where cost is the blocks it
//      must prefill plus the blocks of the requests it is running. A request runs from its
//      timestamp for decode_ms_per_token * output_length (the trace has no finish times;
//      20 ms per token is a typical decode step for an 8B model under load);
//   3. the chosen worker reuses its prefix (Touch; blocks it holds only in host memory are
//      onboarded back to the GPU), evicts as many GPU blocks as its capacity forces
//      (prioritized LRU, leaf first), offloading each victim to its host tier when it has
//      one and the admission filter lets the block in (else dropping it), trims the host
//      tier to its capacity, and stores the request's new blocks: each step reported as the
//      KV events a worker would publish.
// Block-weighted hit rate is the share of prompt blocks the chosen worker already held.
//
// Thread safety: a pure function of its inputs.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "services/bench/trace.h"

namespace kvtier::bench {

struct IndexBenchOptions {
  uint32_t workers = 4;
  uint64_t gpu_blocks_per_worker = 16384;
  uint32_t passes = 5;  // fresh index each pass; the reported pass is the median by time
  double decode_ms_per_token = 20.0;
  uint64_t host_blocks_per_worker = 0;  // 0: no host tier
  bool frequency_admission = false;     // offload only blocks requested at least twice
  double overlap_weight = 1.0;  // routing: weight of blocks to prefill against active blocks
  // The GPU pools' attention window in blocks (0: full attention) and sink blocks: a
  // windowed pool evicts interior blocks past every window, and a request reuses a
  // prefix whose sinks and last window are held (the blocks between need no onboarding).
  uint32_t window_blocks = 0;
  uint32_t sink_blocks = 0;
};

struct IndexBenchResult {
  uint64_t requests = 0;
  uint64_t lookups = 0;
  uint64_t blocks_looked_up = 0;
  uint64_t stored_blocks = 0;   // block-stored events
  uint64_t removed_blocks = 0;  // block-removed (evicted) events
  double seconds = 0.0;         // index time of the median pass
  double ops_per_sec = 0.0;     // (lookups + stored_blocks + removed_blocks) / seconds
  double requests_per_sec = 0.0;
  double lookup_p50_us = 0.0;
  double lookup_p99_us = 0.0;
  double bytes_per_block = 0.0;  // index memory / indexed blocks, at the end of the pass
  uint64_t indexed_blocks = 0;
  double hit_rate = 0.0;  // block-weighted
  uint64_t gpu_hit_blocks = 0;
  uint64_t host_hit_blocks = 0;
  uint64_t offloaded_blocks = 0;  // tier-changed events (GPU -> host), onboards included
  uint64_t onboarded_blocks = 0;
  std::vector<double> pass_seconds;
};

[[nodiscard]] Result<IndexBenchResult> RunIndexBench(const std::vector<TraceRequest>& trace,
                                                     const IndexBenchOptions& options);

}  // namespace kvtier::bench
