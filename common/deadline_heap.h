// DeadlineHeap: deadlines of numbered things (blocks, tier entries), earliest first, for
// retention that expires: the coordinator's index, a worker's block pool and a tier's
// index each keep one.
//
// A deadline is replaced or cancelled by its owner, not here: the owner keeps a
// generation per id and bumps it, and an entry counts only while its generation is the
// id's (the caller's `is_live`). Stale entries are skipped when they come due, and dropped
// all at once when the heap has doubled since it last held only live ones. So the heap
// holds at most about twice the ids with a live deadline, however often deadlines are
// replaced (a block committed again with its retention on every request), at O(1)
// amortized per Push.
//
// Thread safety: none; the owner's thread only.
// REQUIRES: an id's generation never repeats while an entry of its earlier deadline is in
// the heap (bump it when the id is reused too, and make it wide enough not to wrap).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvtier {

template <typename Generation>
class DeadlineHeap {
 public:
  struct Entry {
    int64_t deadline_ns;
    uint32_t id;
    Generation generation;
  };

  // Adds a deadline. `is_live(entry)`: whether an entry is its id's current deadline.
  template <typename IsLive>
  void Push(const Entry& entry, IsLive&& is_live) {
    if (entries_.size() >= 2 * live_after_compaction_ + kCompactionFloor) Compact(is_live);
    entries_.push_back(entry);
    std::push_heap(entries_.begin(), entries_.end(), Later);
  }

  // Removes every entry due at `now_ns` (deadline <= now), earliest first, and calls
  // `on_due(entry)` for each live one.
  template <typename IsLive, typename OnDue>
  void PopDue(int64_t now_ns, IsLive&& is_live, OnDue&& on_due) {
    while (!entries_.empty() && entries_.front().deadline_ns <= now_ns) {
      std::pop_heap(entries_.begin(), entries_.end(), Later);
      const Entry due = entries_.back();
      entries_.pop_back();
      if (is_live(due)) on_due(due);
    }
    live_after_compaction_ = std::min(live_after_compaction_, entries_.size());
  }

  // Calls `visit(entry)` for every entry, live or stale, in no order (snapshots).
  template <typename Visit>
  void ForEach(Visit&& visit) const {
    for (const Entry& entry : entries_) visit(entry);
  }

  size_t size() const { return entries_.size(); }

 private:
  // Below this many entries the heap is never compacted: a pass would not pay for itself.
  static constexpr size_t kCompactionFloor = 64;

  static bool Later(const Entry& a, const Entry& b) { return a.deadline_ns > b.deadline_ns; }

  template <typename IsLive>
  void Compact(IsLive& is_live) {
    std::erase_if(entries_, [&](const Entry& entry) { return !is_live(entry); });
    std::make_heap(entries_.begin(), entries_.end(), Later);
    live_after_compaction_ = entries_.size();
  }

  std::vector<Entry> entries_;  // a min-heap by deadline (std::push_heap with Later)
  size_t live_after_compaction_ = 0;
};

}  // namespace kvtier
