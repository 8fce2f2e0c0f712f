// Route: which worker should serve a prompt, given the index's scores and the workers'
// load. Pure prefix affinity sends every request to the worker that holds a popular system
// prompt; pure load balance throws reuse away. As in Dynamo's KV router, each candidate's
// cost is the work it would add and the work it already has, in blocks:
//
//   cost(worker) = overlap_weight * (prompt blocks it must prefill) + (its active blocks)
//
// and the cheapest worker wins (ties: the longer cached prefix, then the lower node id).
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <span>

#include "services/coordinator/index/block_index.h"

namespace kvtier::coordinator {

struct WorkerLoad {
  NodeId node = 0;
  uint64_t active_blocks = 0;  // KV blocks of the requests it is running now
};

struct RouteChoice {
  NodeId node = 0;
  uint32_t prefix_blocks = 0;  // cached prefix on the chosen worker
  double cost = 0.0;
};

// REQUIRES: `workers` is not empty (callers answer kUnavailable when no worker is live).
[[nodiscard]] RouteChoice ChooseWorker(const LookupResult& lookup, size_t prompt_blocks,
                                       std::span<const WorkerLoad> workers, double overlap_weight = 1.0);

}  // namespace kvtier::coordinator
