#include "services/coordinator/index/block_index.h"

#include <array>

#include "services/coordinator/index/block_index_impl.h"

namespace kvtier::coordinator {
namespace {

// A chain never repeats a key (that would be a cycle); a batch that does is malformed.
// A 1024-bit filter over the keys' hashes makes this linear; a filter hit is confirmed by
// comparing with the keys before it.
bool HasDuplicateKeys(std::span<const BlockKey> keys) {
  std::array<uint64_t, 16> seen{};
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t bit = (keys[i].hi * 0x9E3779B97F4A7C15ULL ^ keys[i].lo) * 0xC2B2AE3D27D4EB4FULL >> 54;
    uint64_t& word = seen[bit >> 6];
    if (word & (uint64_t{1} << (bit & 63))) {
      for (size_t j = 0; j < i; ++j) {
        if (keys[j] == keys[i]) return true;
      }
    }
    word |= uint64_t{1} << (bit & 63);
  }
  return false;
}

}  // namespace

// Every check happens before the first change, so a refused request changes nothing.
// Leaves each key's block (kNil: new) in found_ for Store to use.
Status BlockIndex::Impl::ValidateStore(const StoreRequest& r, uint32_t parent) {
  if (r.location.node >= kMaxNodes) {
    return InvalidArgumentError("node id " + std::to_string(r.location.node) + " is out of range [0, " +
                                std::to_string(kMaxNodes - 1) + "]");
  }
  if (static_cast<int>(r.location.tier) >= kTierCount) return InvalidArgumentError("unknown tier");
  if (!r.retention.empty() && r.retention.size() != r.keys.size()) {
    return InvalidArgumentError("stored event has " + std::to_string(r.keys.size()) + " keys but " +
                                std::to_string(r.retention.size()) + " retention entries");
  }
  for (size_t i = 0; i < r.retention.size(); ++i) {
    if (r.retention[i].priority > kMaxPriority) {
      return InvalidArgumentError("block " + std::to_string(i) + ": priority " +
                                  std::to_string(r.retention[i].priority) + " is out of range [0, 100]");
    }
  }
  if (HasDuplicateKeys(r.keys)) return InvalidArgumentError("stored event repeats a block key");
  found_.clear();
  uint32_t expected_parent = parent;
  for (size_t i = 0; i < r.keys.size(); ++i) {
    const uint32_t b = table_.Find(r.keys[i], blocks_);
    found_.push_back(b);
    if (b == kNil) {
      expected_parent = kNil - 1;  // every later key must be new as well
      continue;
    }
    const Block& block = blocks_[b];
    if (block.scope != r.scope) {
      return InvalidArgumentError("block " + std::to_string(i) + " (" + r.keys[i].ToHex() +
                                  ") is already indexed under another salt scope");
    }
    if (block.parent != expected_parent) {
      return InvalidArgumentError("block " + std::to_string(i) + " (" + r.keys[i].ToHex() +
                                  ") is already indexed with a different parent: the chain is inconsistent");
    }
    expected_parent = b;
  }
  return Status::Ok();
}

Status BlockIndex::Impl::Store(const StoreRequest& r) {
  uint32_t parent = kNil;
  if (r.parent.has_value()) {
    parent = table_.Find(*r.parent, blocks_);
    if (parent == kNil || blocks_[parent].scope != r.scope) {
      return FailedPreconditionError("parent block " + r.parent->ToHex() +
                                     " is not indexed: an event was lost; the node must resync");
    }
  }
  KVTIER_RETURN_IF_ERROR(ValidateStore(r, parent));
  const uint32_t packed = internal::PackLocation(r.location.node, static_cast<uint32_t>(r.location.tier), r.location.pool);
  const uint32_t place = internal::PlaceOf(packed);
  // Pass 1, root to leaf: blocks, retention and locations (a parent's slot exists before
  // its child's, so children_here counts stay exact).
  std::vector<uint32_t>& slots = scratch_;
  slots.clear();
  for (size_t i = 0; i < r.keys.size(); ++i) {
    uint32_t b = found_[i];
    if (b == kNil) b = NewBlock(r.keys[i], parent, r.scope);
    SetRetention(b, r.retention.empty() ? BlockRetention{} : r.retention[i]);
    uint32_t ref = FindHeldSlot(b, place);
    if (ref == kNil) {
      ref = AddLocation(b, packed);  // not linked yet
    } else {
      Unlink(ref);
    }
    slots.push_back(ref);
    parent = b;
  }
  // Pass 2, leaf to root: recency. Ancestors end up more recent than descendants, so a
  // list's least recently used end holds leaves and eviction rarely skips interior blocks.
  for (auto it = slots.rbegin(); it != slots.rend(); ++it) LinkTail(*it);
  return Status::Ok();
}

LookupResult BlockIndex::Impl::Lookup(ScopeId scope, std::span<const BlockKey> keys) const {
  LookupResult result;
  result.location_begin.push_back(0);
  std::vector<double> pending;  // per score entry: the best tier weight for this block
  uint32_t expected_parent = kNil;
  for (uint32_t i = 0; i < keys.size(); ++i) {
    const uint32_t b = table_.Find(keys[i], blocks_);
    if (b == kNil || blocks_[b].scope != scope || blocks_[b].parent != expected_parent || !HasLocation(b)) break;
    expected_parent = b;
    ForEachSlot(b, [&](uint32_t ref) {
      const uint32_t packed = Slot(ref).packed;
      const Location location{static_cast<NodeId>(internal::PackedNode(packed)),
                              static_cast<Tier>(internal::PackedTier(packed)),
                              static_cast<uint16_t>(internal::PackedPool(packed))};
      result.locations.push_back(location);
      const double weight = options_.tier_weights[internal::PackedTier(packed)];
      auto entry = std::find_if(result.scores.begin(), result.scores.end(),
                                [&](const NodeScore& s) { return s.node == location.node; });
      if (entry == result.scores.end()) {
        if (i != 0) return;  // a node must hold the prefix from its first block
        result.scores.push_back({location.node, 0, 0.0});
        pending.push_back(0.0);
        entry = result.scores.end() - 1;
      }
      if (entry->prefix_blocks != i) return;  // this node's prefix ended earlier
      double& best = pending[static_cast<size_t>(entry - result.scores.begin())];
      best = std::max(best, weight);
    });
    for (size_t s = 0; s < result.scores.size(); ++s) {
      if (pending[s] > 0) {
        ++result.scores[s].prefix_blocks;
        result.scores[s].score += pending[s];
        pending[s] = 0;
      }
    }
    ++result.matched_blocks;
    result.location_begin.push_back(static_cast<uint32_t>(result.locations.size()));
  }
  std::stable_sort(result.scores.begin(), result.scores.end(),
                   [](const NodeScore& a, const NodeScore& b) { return a.score > b.score; });
  return result;
}

void BlockIndex::Impl::Touch(NodeId node, ScopeId scope, std::span<const BlockKey> keys) {
  // The prefix this node can serve: chained blocks it holds in some tier.
  std::vector<uint32_t>& chain = scratch_;
  chain.clear();
  uint32_t expected_parent = kNil;
  for (const BlockKey& key : keys) {
    const uint32_t b = table_.Find(key, blocks_);
    if (b == kNil || blocks_[b].scope != scope || blocks_[b].parent != expected_parent) break;
    bool held_here = false;
    ForEachSlot(b, [&](uint32_t ref) { held_here |= internal::PackedNode(Slot(ref).packed) == node; });
    if (!held_here) break;
    chain.push_back(b);
    expected_parent = b;
  }
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    Block& block = blocks_[*it];
    if (block.hits != UINT16_MAX) ++block.hits;
    ForEachSlot(*it, [&](uint32_t ref) {
      if (internal::PackedNode(Slot(ref).packed) == node) MoveToTail(ref);
    });
  }
}

std::vector<BlockKey> BlockIndex::Impl::Evict(NodeId node, Tier tier, size_t count, const Location* demote_to,
                                              const std::function<bool(const BlockKey&)>* admit,
                                              std::vector<BlockKey>* demoted) {
  std::vector<BlockKey> evicted;
  if (node >= nodes_.size() || !nodes_[node]) return evicted;
  auto& lists = nodes_[node]->lists[static_cast<int>(tier)];
  int priority = 0;
  while (priority <= kMaxPriority && evicted.size() < count) {
    uint32_t ref = lists[priority].head;
    bool skipped = false;   // an interior block was passed over in this list
    int restart_at = -1;    // a lower priority list gained a leaf
    while (ref != kNil && evicted.size() < count) {
      const uint32_t next = Slot(ref).lru_next;
      if (Slot(ref).children_here > 0) {  // interior here: its descendants go first
        skipped = true;
        ref = next;
        continue;
      }
      const uint32_t b = Owner(ref);
      const BlockKey key = blocks_[b].key.Key();
      evicted.push_back(key);
      const uint32_t parent = blocks_[b].parent;
      const uint32_t place = internal::PlaceOf(Slot(ref).packed);
      if (demote_to != nullptr && (*admit == nullptr || (*admit)(key))) {
        // Offload: the copy in the lower tier is added before this one goes, so that the
        // block is never collected in between.
        const uint32_t to = internal::PackLocation(node, static_cast<uint32_t>(demote_to->tier), demote_to->pool);
        if (FindHeldSlot(b, internal::PlaceOf(to)) == kNil) LinkTail(AddLocation(b, to));
        demoted->push_back(key);
      } else {
        ++evictions_by_priority_[blocks_[b].priority];
      }
      RemoveLocation(ref);
      ref = next;
      // The parent may just have become a leaf here. It is a candidate before `next` when
      // its priority is lower (a list already passed) or, in this list, when it was
      // passed over as interior (then it lies before `next`).
      const uint32_t pref = parent == kNil ? kNil : FindHeldSlot(parent, place);
      if (pref == kNil || Slot(pref).children_here != 0) continue;
      const int parent_priority = blocks_[parent].priority;
      if (parent_priority < priority) {
        restart_at = parent_priority;
        break;
      }
      if (parent_priority == priority && skipped) ref = lists[priority].head;
    }
    priority = restart_at >= 0 ? restart_at : priority + 1;
  }
  return evicted;
}

// Place of (node, tier): what Remove and ChangeTier look blocks up by.
static uint32_t PlaceOfTier(NodeId node, Tier tier) {
  return internal::PlaceOf(internal::PackLocation(node, static_cast<uint32_t>(tier), 0));
}

uint32_t BlockIndex::Impl::HeldSlotOf(const BlockKey& key, uint32_t place) const {
  const uint32_t b = table_.Find(key, blocks_);
  return b == kNil ? kNil : FindHeldSlot(b, place);
}

size_t BlockIndex::Impl::Remove(NodeId node, Tier tier, std::span<const BlockKey> keys) {
  size_t removed = 0;
  for (const BlockKey& key : keys) {
    const uint32_t ref = HeldSlotOf(key, PlaceOfTier(node, tier));
    if (ref == kNil) continue;
    ++evictions_by_priority_[blocks_[Owner(ref)].priority];
    RemoveLocation(ref);
    ++removed;
  }
  return removed;
}

size_t BlockIndex::Impl::ChangeTier(NodeId node, Tier from, Location to, std::span<const BlockKey> keys) {
  const uint32_t to_packed = internal::PackLocation(node, static_cast<uint32_t>(to.tier), to.pool);
  size_t moved = 0;
  for (const BlockKey& key : keys) {
    const uint32_t from_ref = HeldSlotOf(key, PlaceOfTier(node, from));
    if (from_ref == kNil) continue;
    // Add before removing, so that a block held only here is never collected in between.
    const uint32_t b = Owner(from_ref);
    if (FindHeldSlot(b, internal::PlaceOf(to_packed)) == kNil) LinkTail(AddLocation(b, to_packed));
    RemoveLocation(from_ref);
    ++moved;
  }
  return moved;
}

size_t BlockIndex::Impl::RemoveNode(NodeId node) {
  if (node >= nodes_.size() || !nodes_[node]) return 0;
  size_t removed = 0;
  for (auto& tier_lists : nodes_[node]->lists) {
    for (ListHead& list : tier_lists) {
      while (list.head != kNil) {
        RemoveLocation(list.head);
        ++removed;
      }
    }
  }
  return removed;
}

void BlockIndex::Impl::AdvanceTime() {
  const int64_t now = options_.clock->Now().count();
  while (!expiry_.empty() && expiry_.top().deadline_ns <= now) {
    const ExpiryEntry entry = expiry_.top();
    expiry_.pop();
    Block& block = blocks_[entry.block];
    if (!block.live || block.retention_seq != entry.seq) continue;  // replaced or gone
    SetPriority(entry.block, kDefaultPriority);
    ++expirations_;
  }
}

BlockIndexStats BlockIndex::Impl::Stats() const {
  BlockIndexStats stats;
  stats.blocks = live_blocks_;
  stats.locations = locations_;
  stats.expirations = expirations_;
  stats.evictions_by_priority = evictions_by_priority_;
  stats.memory_bytes = blocks_.memory_bytes() + overflow_.memory_bytes() + table_.memory_bytes() + expiry_.size() * sizeof(ExpiryEntry) +
                       nodes_.size() * sizeof(void*);
  for (const auto& lists : nodes_) stats.memory_bytes += lists ? sizeof(NodeLists) : 0;
  return stats;
}

Result<std::unique_ptr<BlockIndex>> BlockIndex::Create(const BlockIndexOptions& options) {
  if (options.clock == nullptr) return InvalidArgumentError("BlockIndex needs a clock");
  for (double w : options.tier_weights) {
    if (!(w >= 0.0)) return InvalidArgumentError("tier weights must be non-negative");
  }
  if (!(options.tier_weights[0] >= options.tier_weights[1] && options.tier_weights[1] >= options.tier_weights[2])) {
    return InvalidArgumentError("tier weights must not increase from gpu to host to disk");
  }
  return std::unique_ptr<BlockIndex>(new BlockIndex(std::make_unique<Impl>(options)));
}

BlockIndex::BlockIndex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BlockIndex::~BlockIndex() = default;
Status BlockIndex::Store(const StoreRequest& request) { return impl_->Store(request); }
size_t BlockIndex::Remove(NodeId node, Tier tier, std::span<const BlockKey> keys) {
  return impl_->Remove(node, tier, keys);
}
size_t BlockIndex::RemoveNode(NodeId node) { return impl_->RemoveNode(node); }
size_t BlockIndex::ChangeTier(NodeId node, Tier from, Location to, std::span<const BlockKey> keys) {
  return impl_->ChangeTier(node, from, to, keys);
}
LookupResult BlockIndex::Lookup(ScopeId scope, std::span<const BlockKey> keys) const {
  return impl_->Lookup(scope, keys);
}
void BlockIndex::Touch(NodeId node, ScopeId scope, std::span<const BlockKey> keys) { impl_->Touch(node, scope, keys); }
std::vector<BlockKey> BlockIndex::Evict(NodeId node, Tier tier, size_t count) { return impl_->Evict(node, tier, count); }
std::vector<BlockKey> BlockIndex::Demote(NodeId node, Tier from, Location to, size_t count,
                                         const std::function<bool(const BlockKey&)>& admit,
                                         std::vector<BlockKey>* demoted) {
  std::vector<BlockKey> local;
  return impl_->Evict(node, from, count, &to, &admit, demoted != nullptr ? demoted : &local);
}
size_t BlockIndex::Held(NodeId node, Tier tier) const { return impl_->Held(node, tier); }
void BlockIndex::AdvanceTime() { impl_->AdvanceTime(); }
BlockIndexStats BlockIndex::Stats() const { return impl_->Stats(); }

}  // namespace kvtier::coordinator
