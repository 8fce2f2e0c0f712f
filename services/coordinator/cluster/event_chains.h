// JoinChains: a node's events with those that continue one another joined, so that a
// chain of blocks committed together costs the coordinator one event, not one a block.
//
// A stored event joins the stored event before it when it continues that chain (its
// parent is that event's last key) in the same scope, tier and pool, with as many
// tokens a block (none, or the same count), and retention given for its blocks if the
// event's blocks have it. A removal joins a removal of the same tier
// and pool; a tier change one between the same tiers and pools. Nothing else joins, and
// nothing moves: applied in order, the joined events change the index exactly as the
// events they join would, each of their blocks keeping its own retention. A joined
// event spends one sequence number (Coordinator::PublishEvents), and the per-event work
// (conversion, the index's chain store, the parent lookahead) once.
//
// Thread safety: a pure function. Ownership: takes the events, returns them joined.
#pragma once

#include <vector>

#include "services/coordinator/cluster/coordinator.h"

namespace kvtier::coordinator {

// Whether `next` joins `event` (the rules above).
[[nodiscard]] bool JoinsEvent(const KvEvent& event, const KvEvent& next);

// `events` in order, each that JoinsEvent the one before joined to it.
[[nodiscard]] std::vector<KvEvent> JoinChains(std::vector<KvEvent> events);

}  // namespace kvtier::coordinator
