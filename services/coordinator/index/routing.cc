#include "services/coordinator/index/routing.h"

#include <algorithm>

namespace kvtier::coordinator {
namespace {

// Blocks of `prompt` the worker with `score` must still compute.
double PrefillBlocks(const LookupResult& lookup, RoutedPrompt prompt, const NodeScore& score) {
  double blocks = static_cast<double>(prompt.full_blocks -
                                      std::min<size_t>(score.prefix_blocks, prompt.full_blocks));
  const uint32_t block_tokens = lookup.partial.block_tokens;
  if (block_tokens > 0 && prompt.tail_tokens > 0) {
    const size_t tail = std::min<size_t>(prompt.tail_tokens, block_tokens);
    blocks +=
        static_cast<double>(tail - std::min<size_t>(score.partial_tokens, tail)) / block_tokens;
  }
  return blocks;
}

}  // namespace

namespace {

// ChooseWorker's order: the lower cost, then the longer cached prefix, then the lower node id.
bool Better(const RouteChoice& a, const RouteChoice& b) {
  if (a.cost != b.cost) return a.cost < b.cost;
  if (a.prefix_blocks != b.prefix_blocks) return a.prefix_blocks > b.prefix_blocks;
  return a.node < b.node;
}

RouteChoice Score(const LookupResult& lookup, RoutedPrompt prompt, const WorkerLoad& worker,
                  double overlap_weight) {
  NodeScore score{.node = worker.node};
  for (const NodeScore& s : lookup.scores) {
    if (s.node == worker.node) score = s;
  }
  const double cost = overlap_weight * PrefillBlocks(lookup, prompt, score) +
                      static_cast<double>(worker.active_blocks);
  return {worker.node, score.prefix_blocks, score.partial_tokens, cost, worker.active_blocks};
}

}  // namespace

std::vector<RouteChoice> ScoreWorkers(const LookupResult& lookup, RoutedPrompt prompt,
                                      std::span<const WorkerLoad> workers, double overlap_weight) {
  std::vector<RouteChoice> scores;
  scores.reserve(workers.size());
  for (const WorkerLoad& worker : workers)
    scores.push_back(Score(lookup, prompt, worker, overlap_weight));
  std::sort(scores.begin(), scores.end(), Better);
  return scores;
}

RouteChoice ChooseWorker(const LookupResult& lookup, RoutedPrompt prompt,
                         std::span<const WorkerLoad> workers, double overlap_weight) {
  RouteChoice best;
  bool have = false;
  for (const WorkerLoad& worker : workers) {
    const RouteChoice choice = Score(lookup, prompt, worker, overlap_weight);
    if (!have || Better(choice, best)) best = choice;
    have = true;
  }
  return best;
}

}  // namespace kvtier::coordinator
