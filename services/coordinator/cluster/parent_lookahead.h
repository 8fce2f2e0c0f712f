// LaterParentStore: for a stored event whose parent the index does not hold, the later
// stored event of the same batch that brings that parent in, if the stored event may be
// applied after it.
//
// Nodes may send a chain child first: a worker evicts leaves first and hands its victims
// to a store in that order (and with helper threads in no fixed order at all), while its
// own removals of the same blocks reach the coordinator first. Applying such an event
// after its parent's keeps the chain; without the look-ahead the child would be taken
// for an orphan. The event may move only past events that touch none of its blocks and
// never past a cleared event, so that every block's own events keep their order. The
// look-ahead stops after `window` events: a batch is one node's recent changes, in which
// a chain's blocks lie close together.
//
// Thread safety: a pure function.
#pragma once

#include <cstddef>
#include <optional>
#include <span>

#include "services/coordinator/cluster/coordinator.h"

namespace kvtier::coordinator {

inline constexpr size_t kParentLookahead = 4096;

// Looks at the events after `after`: where the event would be applied now (at first `at`
// itself; later, for an event that already waited, the position reached since).
// REQUIRES: events[at] is a stored event with a parent; at <= after; no event in
// (at, after] touches events[at]'s blocks.
[[nodiscard]] std::optional<size_t> LaterParentStore(std::span<const KvEvent> events, size_t at, size_t after,
                                                     size_t window = kParentLookahead);

// Whether an event in (from, to] touches events[at]'s blocks or clears the node: then
// events[at] may not be applied after `to`.
[[nodiscard]] bool TouchedBetween(std::span<const KvEvent> events, size_t at, size_t from, size_t to);

}  // namespace kvtier::coordinator
