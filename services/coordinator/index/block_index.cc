#include "services/coordinator/index/block_index.h"

#include <array>

#include "services/coordinator/index/block_index_impl.h"
#include "services/coordinator/index/node_scores.h"
#include "services/coordinator/index/windowed_scores.h"

namespace kvtier::coordinator {
namespace {

// A chain never repeats a key (that would be a cycle); a batch that does is malformed.
// A 1024-bit filter over the keys' hashes makes this linear; a filter hit is confirmed by
// comparing with the keys before it.
bool HasDuplicateKeys(std::span<const BlockKey> keys) {
  std::array<uint64_t, 16> seen{};
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t bit =
        (keys[i].hi * 0x9E3779B97F4A7C15ULL ^ keys[i].lo) * 0xC2B2AE3D27D4EB4FULL >> 54;
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

Status ValidateStoredBlocks(std::span<const BlockKey> chain,
                            std::span<const BlockRetention> retention, size_t tokens) {
  const size_t keys = chain.size();
  if (HasDuplicateKeys(chain)) return InvalidArgumentError("stored event repeats a block key");
  if (!retention.empty() && retention.size() != keys) {
    return InvalidArgumentError("stored event has " + std::to_string(keys) + " keys but " +
                                std::to_string(retention.size()) + " retention entries");
  }
  for (size_t i = 0; i < retention.size(); ++i) {
    if (retention[i].priority > kMaxPriority) {
      return InvalidArgumentError("block " + std::to_string(i) + ": priority " +
                                  std::to_string(retention[i].priority) +
                                  " is out of range [0, 100]");
    }
  }
  if (tokens != 0 && (keys == 0 || tokens % keys != 0)) {
    return InvalidArgumentError("stored event has " + std::to_string(tokens) + " tokens for " +
                                std::to_string(keys) +
                                " blocks: not the same count for each block");
  }
  return Status::Ok();
}

// Every check happens before the first change, so a refused request changes nothing.
// Leaves each key's block (kNil: new) in found_ for Store to use.
Status BlockIndex::Impl::ValidateStore(const StoreRequest& r, uint32_t parent) {
  if (r.location.node >= kMaxNodes) {
    return InvalidArgumentError("node id " + std::to_string(r.location.node) +
                                " is out of range [0, " + std::to_string(kMaxNodes - 1) + "]");
  }
  if (static_cast<int>(r.location.tier) >= kTierCount) return InvalidArgumentError("unknown tier");
  KVTIER_RETURN_IF_ERROR(ValidateStoredBlocks(r.keys, r.retention, r.tokens.size()));
  found_.clear();
  uint32_t expected_parent = parent;
  for (size_t i = 0; i < r.keys.size(); ++i) {
    const uint32_t b = blocks_.Find(r.keys[i]);
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
      return InvalidArgumentError(
          "block " + std::to_string(i) + " (" + r.keys[i].ToHex() +
          ") is already indexed with a different parent: the chain is inconsistent");
    }
    expected_parent = b;
  }
  const size_t new_blocks = static_cast<size_t>(std::count(found_.begin(), found_.end(), kNil));
  if (blocks_.live() + new_blocks > options_.max_blocks) {
    ++refused_full_;
    return ResourceExhaustedError("the index holds " + std::to_string(blocks_.live()) +
                                  " blocks; " + std::to_string(new_blocks) +
                                  " more would pass its limit of " +
                                  std::to_string(options_.max_blocks));
  }
  return Status::Ok();
}

Status BlockIndex::Impl::Store(const StoreRequest& r) {
  uint32_t parent = kNil;
  if (r.parent.has_value()) {
    parent = blocks_.Find(*r.parent);
    if (parent == kNil || blocks_[parent].scope != r.scope) {
      return FailedPreconditionError("parent block " + r.parent->ToHex() + " is not indexed");
    }
  }
  KVTIER_RETURN_IF_ERROR(ValidateStore(r, parent));
  const uint32_t packed = internal::PackLocation(
      r.location.node, static_cast<uint32_t>(r.location.tier), r.location.pool);
  const uint32_t place = internal::PlaceOf(packed);
  // Pass 1, root to leaf: blocks, retention and locations (a parent's slot exists before
  // its child's, so children_here counts stay exact).
  std::vector<uint32_t>& slots = scratch_;
  slots.clear();
  defer_leaf_changes_ = true;  // a chain's inner blocks stop being leaves as they gain children
  for (size_t i = 0; i < r.keys.size(); ++i) {
    uint32_t b = found_[i];
    if (b == kNil) b = blocks_.NewBlock(r.keys[i], parent, r.scope);
    SetRetention(b, r.retention.empty() ? BlockRetention{} : r.retention[i]);
    uint32_t ref = blocks_.FindHeldSlot(b, place);
    if (ref == kNil) {
      ref = AddLocation(b, packed);  // not linked yet
    } else {
      lists_.Unlink(blocks_, ref);
    }
    slots.push_back(ref);
    parent = b;
  }
  FlushLeafChanges();
  if (!r.tokens.empty()) KeepTokens(r, slots);
  // Pass 2: recency. Full attention, leaf to root: ancestors end up more recent than
  // descendants, so a list's least recently used end holds leaves and eviction rarely
  // skips interior blocks. Windowed, root to leaf, then the sinks: the order in which a
  // request releases blocks as they leave its window, sinks last.
  if (const PoolWindow* window = windows_.At(place)) {
    for (uint32_t ref : slots) lists_.LinkTail(blocks_, ref);
    for (size_t i = 0; i < std::min<size_t>(slots.size(), window->sink_blocks); ++i) {
      if (IsSink(blocks_.Owner(slots[i]), window->sink_blocks))
        lists_.MoveToTail(blocks_, slots[i]);
    }
  } else {
    for (auto it = slots.rbegin(); it != slots.rend(); ++it) lists_.LinkTail(blocks_, *it);
  }
  return Status::Ok();
}

LookupResult BlockIndex::Impl::Lookup(ScopeId scope, std::span<const BlockKey> keys,
                                      std::span<const uint32_t> tail_tokens) const {
  LookupResult result;
  // Sized once for the common answer (a location or two per block, a few nodes) instead
  // of regrown block by block: allocation was a tenth of a lookup's time.
  const size_t expected_blocks = std::min<size_t>(keys.size(), 1024);
  result.location_begin.reserve(expected_blocks + 1);
  result.locations.reserve(2 * expected_blocks);
  result.scores.reserve(8);
  result.location_begin.push_back(0);
  std::vector<double>& pending =
      lookup_pending_;  // per score entry: the best tier weight for this block
  pending.clear();
  WindowedScores windowed(*this);
  uint32_t expected_parent = kNil;
  uint32_t located_prefix = 0;  // blocks each with a location somewhere
  for (uint32_t i = 0; i < keys.size(); ++i) {
    const uint32_t b = blocks_.Find(keys[i]);
    if (b == kNil || blocks_[b].scope != scope || blocks_[b].parent != expected_parent) break;
    // Past a block held nowhere only a windowed pool can serve a longer prefix.
    if (!blocks_.HasLocation(b) && !windows_.any()) break;
    expected_parent = b;
    blocks_.ForEachSlot(b, [&](uint32_t ref) {
      const uint32_t packed = blocks_.Slot(ref).packed;
      const Location location{static_cast<NodeId>(internal::PackedNode(packed)),
                              static_cast<Tier>(internal::PackedTier(packed)),
                              static_cast<uint16_t>(internal::PackedPool(packed))};
      result.locations.push_back(location);
      if (windowed.Held(internal::PlaceOf(packed), i)) return;  // a windowed pool's block
      const std::optional<size_t> s =
          internal::ScoreEntryAt(result.scores, pending, location.node, i);
      if (s)
        pending[*s] = std::max(pending[*s], options_.tier_weights[internal::PackedTier(packed)]);
    });
    for (size_t s = 0; s < result.scores.size(); ++s) {
      if (pending[s] > 0) {
        ++result.scores[s].prefix_blocks;
        result.scores[s].score += pending[s];
        pending[s] = 0;
      }
    }
    if (located_prefix == i && result.locations.size() > result.location_begin.back())
      located_prefix = i + 1;
    result.location_begin.push_back(static_cast<uint32_t>(result.locations.size()));
  }
  std::erase_if(result.scores, [](const NodeScore& s) { return s.prefix_blocks == 0; });
  result.matched_blocks = std::max(located_prefix, windowed.MergeInto(result.scores));
  result.location_begin.resize(result.matched_blocks + 1);
  result.locations.resize(result.location_begin.back());
  // Every key matched: expected_parent is the last one's block (kNil for no keys).
  if (!tail_tokens.empty() && result.matched_blocks == keys.size()) {
    MatchPartial(scope, expected_parent, tail_tokens, result);
  }
  internal::SortBestFirst(result.scores);
  return result;
}

void BlockIndex::Impl::Touch(NodeId node, ScopeId scope, std::span<const BlockKey> keys) {
  // The chain as far as the node can serve it: blocks it holds in some tier or, with
  // windowed pools, as far as the chain is indexed. full_prefix: the blocks held in a
  // full-attention place of the node, consecutively from the first.
  std::vector<uint32_t>& chain = scratch_;
  chain.clear();
  const bool windows = windows_.Any(node);
  auto full_place_here = [&](uint32_t packed) {
    return internal::PackedNode(packed) == node &&
           (!windows || windows_.At(internal::PlaceOf(packed)) == nullptr);
  };
  uint32_t full_prefix = 0;
  uint32_t expected_parent = kNil;
  for (const BlockKey& key : keys) {
    const uint32_t b = blocks_.Find(key);
    if (b == kNil || blocks_[b].scope != scope || blocks_[b].parent != expected_parent) break;
    bool held_here = false, held_full = false;
    blocks_.ForEachSlot(b, [&](uint32_t ref) {
      const uint32_t packed = blocks_.Slot(ref).packed;
      held_here |= internal::PackedNode(packed) == node;
      held_full |= full_place_here(packed);
    });
    if (!held_here && !windows) break;
    if (held_full && full_prefix == chain.size()) ++full_prefix;
    chain.push_back(b);
    expected_parent = b;
  }
  for (uint32_t i = full_prefix; i-- > 0;) {
    Block& block = blocks_[chain[i]];
    if (block.hits != UINT16_MAX) ++block.hits;
    for (uint32_t ref : HeldSlotsInPlaceOrder(
             chain[i], [&](uint32_t r) { return full_place_here(blocks_.Slot(r).packed); })) {
      lists_.MoveToTail(blocks_, ref);
    }
  }
  if (windows) {
    for (const auto& [place, window] : windows_.Of(node)) TouchWindowed(place, window, chain);
  }
}

// A request over the prefix a windowed pool serves uses its last window and its sinks:
// those are renewed, the window in chain order (blocks leave a request's window oldest
// first), then the sinks (held to the end). The blocks between were not used.
void BlockIndex::Impl::TouchWindowed(uint32_t place, const PoolWindow& window,
                                     std::span<const uint32_t> chain) {
  WindowedScores served_by(*this);
  for (uint32_t i = 0; i < chain.size(); ++i) {
    if (blocks_.FindHeldSlot(chain[i], place) != kNil) served_by.Held(place, i);
  }
  const uint32_t served = served_by.Served(place);
  const uint32_t sinks = std::min(window.sink_blocks, served);
  const uint32_t from =
      std::max(sinks, served > window.window_blocks ? served - window.window_blocks : 0);
  auto renew = [&](uint32_t i) {
    Block& block = blocks_[chain[i]];
    if (block.hits != UINT16_MAX) ++block.hits;
    lists_.MoveToTail(blocks_, blocks_.FindHeldSlot(chain[i], place));
  };
  for (uint32_t i = from; i < served; ++i) renew(i);
  for (uint32_t i = 0; i < sinks; ++i) renew(i);
}

std::vector<BlockKey> BlockIndex::Impl::Evict(NodeId node, Tier tier, size_t count,
                                              const Location* demote_to,
                                              const std::function<bool(const BlockKey&)>* admit,
                                              std::vector<BlockKey>* demoted) {
  std::vector<BlockKey> evicted;
  if (!lists_.Has(node)) return evicted;
  auto list = [&](int priority) -> internal::ListHead& {
    return lists_.List(node, static_cast<int>(tier), priority);
  };
  int priority = 0;
  while (priority <= kMaxPriority && evicted.size() < count) {
    uint32_t ref = list(priority).head;
    bool skipped = false;  // an interior block was passed over in this list
    int restart_at = -1;   // a lower priority list gained a leaf
    while (ref != kNil && evicted.size() < count) {
      const uint32_t next = blocks_.Slot(ref).lru_next;
      if (!Evictable(ref)) {  // interior here: its descendants go first
        skipped = true;
        ref = next;
        continue;
      }
      const uint32_t b = blocks_.Owner(ref);
      const BlockKey key = blocks_[b].key.Key();
      evicted.push_back(key);
      if (demote_to != nullptr && (*admit == nullptr || (*admit)(key))) {
        // Offload: the copy in the lower tier is added before this one goes, so that the
        // block is never collected in between.
        const uint32_t to =
            internal::PackLocation(node, static_cast<uint32_t>(demote_to->tier), demote_to->pool);
        if (blocks_.FindHeldSlot(b, internal::PlaceOf(to)) == kNil)
          lists_.LinkTail(blocks_, AddLocation(b, to));
        demoted->push_back(key);
      } else {
        ++evictions_by_priority_[blocks_[b].priority];
      }
      newly_evictable_ = kNoPriority;
      RemoveLocation(ref);
      ref = next;
      // An ancestor may just have become evictable (the parent a leaf; in a windowed pool,
      // a block whose window lost its last leaf). It comes before `next` when its priority
      // is lower (a list already passed) or, in this list, when it was passed over (then
      // it lies before `next`).
      if (newly_evictable_ < priority) {
        restart_at = newly_evictable_;
        break;
      }
      if (newly_evictable_ == priority && skipped) ref = list(priority).head;
    }
    priority = restart_at >= 0 ? restart_at : priority + 1;
  }
  return evicted;
}

// The place of a location (node, tier and pool): what Remove and ChangeTier look blocks up by.
static uint32_t PlaceOfLocation(Location l) {
  return internal::PlaceOf(internal::PackLocation(l.node, static_cast<uint32_t>(l.tier), l.pool));
}

uint32_t BlockIndex::Impl::HeldSlotOf(const BlockKey& key, uint32_t place) const {
  const uint32_t b = blocks_.Find(key);
  return b == kNil ? kNil : blocks_.FindHeldSlot(b, place);
}

size_t BlockIndex::Impl::Remove(Location location, std::span<const BlockKey> keys) {
  size_t removed = 0;
  for (const BlockKey& key : keys) {
    const uint32_t ref = HeldSlotOf(key, PlaceOfLocation(location));
    if (ref == kNil) continue;
    ++evictions_by_priority_[blocks_[blocks_.Owner(ref)].priority];
    RemoveLocation(ref);
    ++removed;
  }
  return removed;
}

size_t BlockIndex::Impl::ChangeTier(Location from, Location to, std::span<const BlockKey> keys) {
  const uint32_t to_packed =
      internal::PackLocation(from.node, static_cast<uint32_t>(to.tier), to.pool);
  size_t moved = 0;
  for (const BlockKey& key : keys) {
    const uint32_t from_ref = HeldSlotOf(key, PlaceOfLocation(from));
    if (from_ref == kNil) continue;
    // Add before removing, so that a block held only here is never collected in between.
    const uint32_t b = blocks_.Owner(from_ref);
    if (blocks_.FindHeldSlot(b, internal::PlaceOf(to_packed)) == kNil)
      lists_.LinkTail(blocks_, AddLocation(b, to_packed));
    RemoveLocation(from_ref);
    ++moved;
  }
  return moved;
}

size_t BlockIndex::Impl::RemoveNode(NodeId node) {
  if (!lists_.Has(node)) return 0;
  size_t removed = 0;
  for (int tier = 0; tier < kTierCount; ++tier) {
    for (int priority = 0; priority <= kMaxPriority; ++priority) {
      internal::ListHead& list = lists_.List(node, tier, priority);
      while (list.head != kNil) {
        RemoveLocation(list.head);
        ++removed;
      }
    }
  }
  return removed;
}

void BlockIndex::Impl::AdvanceTime() {
  deadlines_.PopDue(blocks_, options_.clock->Now().count(),
                    [this](uint32_t b) { SetPriority(b, kDefaultPriority); });
}

BlockIndexStats BlockIndex::Impl::Stats() const {
  BlockIndexStats stats;
  stats.blocks = blocks_.live();
  stats.locations = locations_;
  stats.expirations = deadlines_.expirations();
  stats.refused_full = refused_full_;
  stats.evictions_by_priority = evictions_by_priority_;
  stats.memory_bytes = blocks_.memory_bytes() + lists_.memory_bytes() + windows_.memory_bytes() +
                       deadlines_.memory_bytes() + tokens_.memory_bytes();
  return stats;
}

Result<std::unique_ptr<BlockIndex>> BlockIndex::Create(const BlockIndexOptions& options) {
  static_assert(kMaxIndexBlocks == internal::kMaxKeyTableBlocks);
  if (options.clock == nullptr) return InvalidArgumentError("BlockIndex needs a clock");
  if (options.max_blocks == 0 || options.max_blocks > kMaxIndexBlocks) {
    return InvalidArgumentError("max_blocks " + std::to_string(options.max_blocks) +
                                " is out of range [1, " + std::to_string(kMaxIndexBlocks) + "]");
  }
  for (double w : options.tier_weights) {
    if (!(w >= 0.0)) return InvalidArgumentError("tier weights must be non-negative");
  }
  if (!(options.tier_weights[0] >= options.tier_weights[1] &&
        options.tier_weights[1] >= options.tier_weights[2])) {
    return InvalidArgumentError("tier weights must not increase from gpu to host to disk");
  }
  return std::unique_ptr<BlockIndex>(new BlockIndex(std::make_unique<Impl>(options)));
}

BlockIndex::BlockIndex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BlockIndex::~BlockIndex() = default;
Status BlockIndex::Store(const StoreRequest& request) { return impl_->Store(request); }
size_t BlockIndex::Remove(Location location, std::span<const BlockKey> keys) {
  return impl_->Remove(location, keys);
}
Status BlockIndex::SetNodeWindows(NodeId node, std::span<const PoolWindowSpec> windows) {
  return impl_->SetNodeWindows(node, windows);
}
size_t BlockIndex::RemoveNode(NodeId node) { return impl_->RemoveNode(node); }
size_t BlockIndex::ChangeTier(Location from, Location to, std::span<const BlockKey> keys) {
  return impl_->ChangeTier(from, to, keys);
}
LookupResult BlockIndex::Lookup(ScopeId scope, std::span<const BlockKey> keys,
                                std::span<const uint32_t> tail_tokens) const {
  return impl_->Lookup(scope, keys, tail_tokens);
}
void BlockIndex::Touch(NodeId node, ScopeId scope, std::span<const BlockKey> keys) {
  impl_->Touch(node, scope, keys);
}
std::vector<BlockKey> BlockIndex::Evict(NodeId node, Tier tier, size_t count) {
  return impl_->Evict(node, tier, count);
}
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
