// LaterParentStore: for a stored event whose parent the index does not hold, the later
// stored event of the same batch that brings that parent in, if the stored event may be
// applied after it.
//
// Nodes may send a chain child first: a worker evicts leaves first and hands its victims
// to a store in that order (and with helper threads in no fixed order at all), while its
// own removals of the same blocks reach the coordinator first. Applying such an event
// after its parent's keeps the chain; without the look-ahead the child would be taken
// for an orphan. The event may move only past events that say nothing of its blocks in
// its place (Supersedes) and never past a cleared event, so that the events of each
// block in each place keep their order. The
// look-ahead stops after `window` events: a batch is one node's recent changes, in which
// a chain's blocks lie close together.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <optional>
#include <span>

#include "services/coordinator/cluster/coordinator.h"

namespace kvtier::coordinator {

inline constexpr size_t kParentLookahead = 4096;

// Whether `later`, an event of the node after `stored` (a stored event), puts `stored`
// out of date, so that it may not be applied after `later`: `later` clears the node, or
// stores, removes or moves one of stored's blocks in stored's place (tier and pool), or
// moves one there. Events of the same blocks in other places leave it true: a demotion
// tells the store below before the removal above, and the copy below stays.
[[nodiscard]] bool Supersedes(const KvEvent& later, const KvEvent& stored);

// Looks at the events after `after`: where the event would be applied now (at first `at`
// itself; later, for an event that already waited, the position reached since).
// REQUIRES: events[at] is a stored event with a parent; at <= after; no event in
// (at, after] supersedes events[at].
[[nodiscard]] std::optional<size_t> LaterParentStore(std::span<const KvEvent> events, size_t at,
                                                     size_t after,
                                                     size_t window = kParentLookahead);

// Whether dropping `stored`, which `later` supersedes, leaves its blocks held where the
// index does not know them: `later` moves them out of stored's place (a tier change). A
// removal, a store again in the place or a clear loses nothing: the blocks are gone, or
// the later store tells them.
[[nodiscard]] bool LeavesBlocksUnindexed(const KvEvent& later, const KvEvent& stored);

// The first event in (from, to] that supersedes events[at] (which then may not be
// applied after `to`); nullopt when none does.
[[nodiscard]] std::optional<size_t> SupersededAt(std::span<const KvEvent> events, size_t at,
                                                 size_t from, size_t to);

}  // namespace kvtier::coordinator
