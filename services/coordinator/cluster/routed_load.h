// RoutedLoad: what the coordinator itself has routed to each node lately, as a load for
// nodes that report none (inference engines, whose KV event streams carry no load).
//
// Each route adds the prompt's blocks to the chosen node; the sum halves every
// `half_life`, standing in for the requests finishing (no engine says when they do). As
// Dynamo's router counts its own decisions as each worker's active blocks; without it,
// every prompt that no engine has cached costs the same everywhere and goes to the first
// candidate. A gateway that knows the engines' loads passes them instead
// (RouteQuery::candidate_active_blocks), and then this is not used.
//
// Thread safety: none (the coordinator's thread). A half life of 0 turns it off.
#pragma once

#include <cmath>
#include <cstdint>
#include <unordered_map>

#include "common/clock.h"
#include "services/coordinator/index/block_index.h"

namespace kvtier::coordinator {

class RoutedLoad {
 public:
  explicit RoutedLoad(Nanos half_life) : half_life_(half_life) {}

  bool enabled() const { return half_life_.count() > 0; }

  void Add(NodeId node, double blocks, Nanos now) {
    if (!enabled()) return;
    Entry& e = loads_[node];
    e.blocks = Decayed(e, now) + blocks;
    e.at = now;
  }

  // The node's routed blocks now, decayed.
  double Get(NodeId node, Nanos now) const {
    const auto it = loads_.find(node);
    return it == loads_.end() ? 0.0 : Decayed(it->second, now);
  }

  void Forget(NodeId node) { loads_.erase(node); }

 private:
  struct Entry {
    double blocks = 0;
    Nanos at{0};
  };

  double Decayed(const Entry& e, Nanos now) const {
    if (e.blocks == 0 || now <= e.at) return e.blocks;
    const double halvings = std::chrono::duration<double>(now - e.at) / half_life_;
    return e.blocks * std::exp2(-halvings);
  }

  Nanos half_life_;
  std::unordered_map<NodeId, Entry> loads_;
};

}  // namespace kvtier::coordinator
