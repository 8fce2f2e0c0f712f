#include "services/coordinator/index/routing.h"

#include <algorithm>

namespace kvtier::coordinator {
namespace {

// Blocks of `prompt` the worker with `score` must still compute.
double PrefillBlocks(const LookupResult& lookup, RoutedPrompt prompt, const NodeScore& score) {
  double blocks = static_cast<double>(prompt.full_blocks - std::min<size_t>(score.prefix_blocks, prompt.full_blocks));
  const uint32_t block_tokens = lookup.partial.block_tokens;
  if (block_tokens > 0 && prompt.tail_tokens > 0) {
    const size_t tail = std::min<size_t>(prompt.tail_tokens, block_tokens);
    blocks += static_cast<double>(tail - std::min<size_t>(score.partial_tokens, tail)) / block_tokens;
  }
  return blocks;
}

}  // namespace

RouteChoice ChooseWorker(const LookupResult& lookup, RoutedPrompt prompt, std::span<const WorkerLoad> workers,
                         double overlap_weight) {
  RouteChoice best;
  bool have = false;
  for (const WorkerLoad& worker : workers) {
    NodeScore score{.node = worker.node};
    for (const NodeScore& s : lookup.scores) {
      if (s.node == worker.node) score = s;
    }
    const double cost =
        overlap_weight * PrefillBlocks(lookup, prompt, score) + static_cast<double>(worker.active_blocks);
    const bool better = !have || cost < best.cost ||
                        (cost == best.cost && (score.prefix_blocks > best.prefix_blocks ||
                                               (score.prefix_blocks == best.prefix_blocks && worker.node < best.node)));
    if (better) best = {worker.node, score.prefix_blocks, score.partial_tokens, cost};
    have = true;
  }
  return best;
}

}  // namespace kvtier::coordinator
