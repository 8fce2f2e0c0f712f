#include "services/coordinator/index/routing.h"

namespace kvtier::coordinator {

RouteChoice ChooseWorker(const LookupResult& lookup, size_t prompt_blocks, std::span<const WorkerLoad> workers,
                         double overlap_weight) {
  RouteChoice best;
  bool have = false;
  for (const WorkerLoad& worker : workers) {
    uint32_t prefix = 0;
    for (const NodeScore& score : lookup.scores) {
      if (score.node == worker.node) prefix = score.prefix_blocks;
    }
    const double cost =
        overlap_weight * static_cast<double>(prompt_blocks - prefix) + static_cast<double>(worker.active_blocks);
    const bool better = !have || cost < best.cost ||
                        (cost == best.cost && (prefix > best.prefix_blocks ||
                                               (prefix == best.prefix_blocks && worker.node < best.node)));
    if (better) best = {worker.node, prefix, cost};
    have = true;
  }
  return best;
}

}  // namespace kvtier::coordinator
