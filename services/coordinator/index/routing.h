// Route: which worker should serve a prompt, given the index's scores and the workers'
// load. Pure prefix affinity sends every request to the worker that holds a popular system
// prompt; pure load balance throws reuse away. As in Dynamo's KV router, each candidate's
// cost is the work it would add and the work it already has, in blocks:
//
//   cost(worker) = overlap_weight * (prompt blocks it must prefill) + (its active blocks)
//
// and the cheapest worker wins (ties: the longer cached prefix, then the lower node id).
// A prompt's partial last block counts as the share of a block its tokens are; a worker
// that can reuse some of them (NodeScore::partial_tokens) prefills only the rest.
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "services/coordinator/index/block_index.h"

namespace kvtier::coordinator {

struct WorkerLoad {
  NodeId node = 0;
  uint64_t active_blocks = 0;  // KV blocks of the requests it is running now
};

// The prompt being routed: its full blocks (the lookup's keys) and the tokens after them.
struct RoutedPrompt {
  size_t full_blocks = 0;
  size_t tail_tokens = 0;
};

struct RouteChoice {
  NodeId node = 0;
  uint32_t prefix_blocks = 0;   // cached prefix on the chosen worker
  uint32_t partial_tokens = 0;  // tail tokens the chosen worker can reuse
  double cost = 0.0;
  uint64_t active_blocks = 0;  // its load
};

// `lookup`: the index's answer for the prompt's keys and tail. The tail's share of a block
// is known from the partially matching block's size; where nothing matched partially it is
// the same for every worker and left out.
// REQUIRES: `workers` is not empty (callers answer kUnavailable when no worker is live).
// Every worker's cost, cheapest (as ChooseWorker picks) first.
// REQUIRES: as ChooseWorker.
[[nodiscard]] std::vector<RouteChoice> ScoreWorkers(const LookupResult& lookup, RoutedPrompt prompt,
                                                    std::span<const WorkerLoad> workers,
                                                    double overlap_weight = 1.0);
[[nodiscard]] RouteChoice ChooseWorker(const LookupResult& lookup, RoutedPrompt prompt,
                                       std::span<const WorkerLoad> workers,
                                       double overlap_weight = 1.0);

}  // namespace kvtier::coordinator
