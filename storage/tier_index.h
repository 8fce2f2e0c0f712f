// TierIndex: the bookkeeping every tier shares, with no memory or I/O of its own.
//
// It maps (format tag, key) to a dense entry id, keeps each entry's header and size, and
// orders the entries not held (Hold) for eviction: prioritized LRU on the effective priority
// (the stored priority until its retention runs out, then the default 35). Retention
// deadlines sit in a min-heap checked on every call that picks a victim, never a scan.
// A retention running out moves the entry to the newest place of the default priority;
// that is the one reordering it causes.
//
// Thread safety: none; each tier calls it under its own lock.
// REQUIRES: ids passed in are live (returned by Insert and not erased).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/deadline_heap.h"
#include "common/prioritized_lru.h"
#include "storage/block_header.h"
#include "storage/key_slots.h"

namespace kvtier::storage {

class TierIndex {
 public:
  static constexpr uint32_t kNil = PrioritizedLru::kNil;

  struct Entry {
    BlockHeader header;       // retention_left_ms as given at Insert
    int64_t deadline_ns = 0;  // 0: the priority never expires
    uint64_t units = 0;       // the tier's measure of the entry's size (pages, bytes)
    uint64_t location = 0;    // the tier's own use (first page)
    uint32_t generation = 0;
    bool live = false;
    bool held = false;  // out of the eviction order until erased (Hold)
  };

  explicit TierIndex(const Clock* clock) : clock_(clock), lru_(0) {}

  uint32_t Find(const BlockKey& key, std::string_view format_tag) const;
  // The entry `ref` names when it is stored under ref's salt scope; kNil when it is absent
  // or another tenant's (the two are indistinguishable to the caller, on purpose).
  uint32_t FindVisible(const BlockRef& ref) const {
    const uint32_t id = Find(ref.key, ref.format_tag);
    return id != kNil && entries_[id].header.salt_scope == ref.salt_scope ? id : kNil;
  }
  // A new entry, most recently used. REQUIRES: Find(...) == kNil.
  uint32_t Insert(const BlockHeader& header, uint64_t units, uint64_t location);
  // An entry Erase took out for an eviction that did not happen (its tier's write
  // failed): back as the least recently used of its priority. Entries restored in the
  // reverse order of their eviction get their old order back. REQUIRES: as Insert.
  uint32_t Restore(const BlockHeader& header, uint64_t units, uint64_t location);
  void Erase(uint32_t id);
  // Most recently used (unless held); `header`'s priority and retention replace the stored ones.
  void Refresh(uint32_t id, const BlockHeader& header);
  // Most recently used; a held entry stays out of the eviction order.
  void Touch(uint32_t id);
  // Takes the entry out of the eviction order for good while it stays findable: the tier
  // is evicting it and hands its bytes on before it leaves (the host tier's demotions).
  // Touch and Refresh leave it out; Erase ends it.
  void Hold(uint32_t id);
  // The tier moved the entry's bytes (the disk tier's compaction).
  void Relocate(uint32_t id, uint64_t location) { entries_[id].location = location; }

  // The next entry to evict (retention deadlines applied first); kNil when empty.
  uint32_t Victim();
  // The entries that evicting `units` would take, in eviction order (retention deadlines
  // applied first): the fewest from the front whose units reach `units`, all when fewer.
  std::vector<uint32_t> VictimsFor(uint64_t units);

  const Entry& entry(uint32_t id) const { return entries_[id]; }
  // The entry's header with retention_left_ms as of now, to pass the block on.
  BlockHeader CurrentHeader(uint32_t id) const;
  // Every stored block's CurrentHeader.
  std::vector<BlockHeader> CurrentHeaders() const;
  uint8_t EffectivePriority(uint32_t id) const;
  size_t size() const { return by_key_.size(); }
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    by_key_.ForEachId(fn);
  }
  uint64_t units() const { return units_; }

 private:
  // Format tags are looked up by string_view, without making a string (C++20's
  // heterogeneous lookup).
  struct FormatHash {
    using is_transparent = void;
    size_t operator()(std::string_view tag) const { return std::hash<std::string_view>{}(tag); }
  };
  using Deadline = DeadlineHeap<uint32_t>::Entry;  // generation: the entry's, when it was set

  uint32_t FormatId(std::string_view format_tag) const;
  uint32_t InternFormat(std::string_view format_tag);
  void SetPolicy(uint32_t id, const BlockHeader& header);
  void ApplyDeadlines();
  // Whether `d` is its entry's current deadline (not re-set, the entry not erased).
  bool DeadlineLive(const Deadline& d) const {
    return entries_[d.id].live && entries_[d.id].generation == d.generation;
  }
  int64_t NowNs() const { return clock_->Now().count(); }

  const Clock* clock_;
  std::vector<std::string> formats_;
  std::unordered_map<std::string, uint32_t, FormatHash, std::equal_to<>> format_ids_;
  KeySlots by_key_;  // (format id, key) -> entry id
  std::vector<Entry> entries_;
  std::vector<uint32_t> free_ids_;
  PrioritizedLru lru_;
  DeadlineHeap<uint32_t> deadlines_;
  uint64_t units_ = 0;
};

}  // namespace kvtier::storage
