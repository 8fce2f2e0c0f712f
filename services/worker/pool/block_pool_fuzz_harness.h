// The BlockPool fuzz target's harness: the model of what the pool must hold (the
// caller's side: sequences, references, holds, what is cached) and the calls it drives,
// each checked against the model (block_pool_fuzz.cc says what is checked). Fuzz-only.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "common/block_key.h"
#include "common/clock.h"
#include "services/worker/pool/block_pool.h"
#include "tests/testing/fuzz_check.h"
#include "tests/testing/fuzz_choices.h"

namespace kvtier::worker::fuzzing {

using kvtier::testing::FuzzCheck;
using kvtier::testing::FuzzChoices;

inline constexpr uint32_t kSequenceIds = 4;
inline constexpr std::array<uint64_t, 2> kFormats = {7, 8};
inline const std::array<BlockKey, 2> kRoots = {RootKey("tenant a"), RootKey("tenant b")};

struct CachedModel {
  BlockId block;
  BlockKey parent;
  bool first;
  uint64_t scope;
  uint64_t format;
  uint8_t priority;
  std::optional<Nanos> deadline;  // when `priority` reverts to the default
  std::vector<uint32_t> tokens;   // as TokensOf gives them: empty unless a partial-reuse candidate
  uint64_t checksum = 0;
  // Full attention: the block that cached the parent key when this one was stored, while
  // it caches it still (the pool's leaf-first eviction counts these links).
  std::optional<BlockId> parent_block = std::nullopt;
};

struct SequenceModel {
  BlockKey root;
  uint64_t scope = 0;
  uint64_t format = 0;
  std::vector<uint32_t> tokens;  // every token so far: the prompt, then its extensions
  std::vector<BlockKey> keys;    // one per full block of `tokens`
  std::vector<BlockId> table;
};

inline uint32_t CommonLead(std::span<const uint32_t> a, std::span<const uint32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  return static_cast<uint32_t>(std::mismatch(a.begin(), a.begin() + n, b.begin()).first -
                               a.begin());
}

inline bool SameStats(const BlockPoolStats& a, const BlockPoolStats& b) {
  return a.free == b.free && a.cached == b.cached && a.in_use == b.in_use && a.held == b.held &&
         a.allocated_blocks == b.allocated_blocks && a.reused_blocks == b.reused_blocks &&
         a.partial_reuses == b.partial_reuses && a.partial_copies == b.partial_copies &&
         a.evictions_by_priority == b.evictions_by_priority && a.offloads == b.offloads;
}

class Harness {
 public:
  explicit Harness(FuzzChoices& in) {
    options_.num_blocks = 1 + in.Below(12);
    options_.tokens_per_block = 1 + in.Below(4);
    if (in.Below(2) == 1) {
      options_.window_tokens = 1 + in.Below(12);
      options_.sink_tokens = in.Below(4);
    }
    options_.partial_reuse = in.Below(4) != 0;
    options_.secondary_offload_min_priority = static_cast<uint8_t>(in.Below(101));
    options_.clock = &clock_;
    pool_ = BlockPool::Create(options_).value();
  }

  void Step(FuzzChoices& in) {
    before_ = pool_->Stats();
    refs_before_ = Refs();
    switch (in.Below(12)) {
      case 0:
      case 1: return Start(in);
      case 2: return Extend(in);
      case 3:
      case 4: return Commit(in);
      case 5: return FreeSequence(in);
      case 6: return Allocate(in);
      case 7:
        return DropEach(in, loose_, &BlockPool::FreeBlocks,
                        "a free drops only references AllocateBlocks gave");
      case 8: return Hold(in);
      case 9:
        return DropEach(in, holds_, &BlockPool::ReleaseBlocks,
                        "a release drops exactly holds that were taken");
      case 10: return RememberChecksums(in);
      default: return Advance(in);
    }
  }

 private:
  uint32_t tpb() const { return options_.tokens_per_block; }

  // The model's references per block: sequence tables, AllocateBlocks, holds.
  std::vector<uint32_t> Refs() const {
    std::vector<uint32_t> refs(options_.num_blocks, 0);
    for (const auto& [id, s] : sequences_) {
      for (const BlockId b : s.table) {
        if (b != kNoBlock) ++refs[b];
      }
    }
    for (const auto& [b, n] : loose_) refs[b] += n;
    for (const auto& [b, n] : holds_) refs[b] += n;
    return refs;
  }

  const BlockKey* CachedKeyOf(BlockId b) const {
    const auto it = cached_by_block_.find(b);
    return it == cached_by_block_.end() ? nullptr : &it->second;
  }

  uint32_t Available() const {
    uint32_t available = 0;
    for (BlockId b = 0; b < options_.num_blocks; ++b) available += refs_before_[b] == 0;
    return available;
  }

  // A refused call: no event, no change.
  void CheckRefused() {
    FuzzCheck(pool_->TakeEvents().empty(), "a refused call emits no event");
    FuzzCheck(SameStats(before_, pool_->Stats()), "a refused call changes no count");
    CheckState();
  }

  void CheckOutcome(const Status& status, bool predicted_ok, const char* what) {
    FuzzCheck(status.ok() == predicted_ok, what);
    if (!status.ok()) CheckRefused();
  }

  // The blocks a call handed out blank: nobody referenced them, nothing caches them.
  void CheckBlank(std::span<const BlockId> blocks, std::set<BlockId>* seen) {
    for (const BlockId b : blocks) {
      FuzzCheck(b < options_.num_blocks, "a blank block is a block of the pool");
      FuzzCheck(refs_before_[b] == 0, "a blank block was referenced by nobody");
      FuzzCheck(CachedKeyOf(b) == nullptr, "a blank block is cached under no key");
      FuzzCheck(seen->insert(b).second, "a blank block is handed out once");
    }
  }

  void Forget(const BlockKey& key) {
    const BlockId block = cached_.at(key).block;
    for (auto& [other, c] : cached_) {
      if (c.parent_block == block) c.parent_block.reset();  // the child's link goes with its parent
    }
    cached_by_block_.erase(block);
    cached_.erase(key);
  }

  // Is `victim` the block eviction must take now: the lowest priority among the
  // unreferenced leaves (in a full-attention pool; among all unreferenced blocks in a
  // windowed one, or when none is a leaf)? A leaf is a block no cached child links to.
  void CheckVictimOrder(const CachedModel& victim) {
    const auto linked_children = [&](BlockId b) {
      return std::count_if(cached_.begin(), cached_.end(),
                           [&](const auto& e) { return e.second.parent_block == b; });
    };
    std::vector<const CachedModel*> candidates, leaves;
    for (const auto& [key, c] : cached_) {
      if (refs_before_[c.block] != 0) continue;
      candidates.push_back(&c);
      if (options_.window_tokens != 0 || linked_children(c.block) == 0) leaves.push_back(&c);
    }
    const std::vector<const CachedModel*>& eligible = leaves.empty() ? candidates : leaves;
    FuzzCheck(std::find(eligible.begin(), eligible.end(), &victim) != eligible.end(),
              "an allocation evicts leaves first in a full-attention pool");
    for (const CachedModel* c : eligible) {
      FuzzCheck(victim.priority <= c->priority, "an allocation evicts the lowest priority first");
    }
  }

  // Takes the call's events and applies them to the model. Evictions (all but a start's
  // in-place reuse, `reused_in_place`) must match `evicted`, in order.
  void ApplyEvictions(std::span<const EvictedBlock> evicted, std::optional<BlockId> reused_in_place,
                      bool check_order) {
    size_t next = 0;
    for (const PoolEvent& e : TakeNumberedEvents()) {
      FuzzCheck(e.kind != PoolEvent::Kind::kStored, "only a commit stores");
      const auto it = cached_.find(e.key);
      FuzzCheck(it != cached_.end() && it->second.block == e.block,
                "a removal names a cached block");
      const CachedModel& c = it->second;
      FuzzCheck(e.parent == c.parent && e.first == c.first && e.salt_scope == c.scope &&
                    e.priority == c.priority,
                "a removal carries the block's stored parent, scope and priority");
      if (reused_in_place == e.block && e.kind == PoolEvent::Kind::kRemoved) {
        FuzzCheck(refs_before_[e.block] == 0, "a block reused in place was referenced by nobody");
        reused_in_place.reset();
        Forget(e.key);
        continue;
      }
      FuzzCheck(next < evicted.size(), "every eviction is reported");
      const EvictedBlock& v = evicted[next++];
      const bool offload = c.priority >= options_.secondary_offload_min_priority;
      FuzzCheck(v.block == e.block && v.key == e.key && v.parent == c.parent &&
                    v.first == c.first && v.format_tag == c.format && v.salt_scope == c.scope &&
                    v.priority == c.priority,
                "an evicted block is reported as it was stored");
      FuzzCheck(v.offload == offload && (e.kind == PoolEvent::Kind::kOffloaded) == offload,
                "a victim is offloaded exactly from the threshold up");
      FuzzCheck(refs_before_[e.block] == 0, "a victim was referenced by nobody");
      if (check_order) CheckVictimOrder(c);
      Forget(e.key);
    }
    FuzzCheck(next == evicted.size(), "every reported eviction has its event");
    FuzzCheck(!reused_in_place.has_value(), "a block reused in place leaves the cache");
  }

  std::vector<PoolEvent> TakeNumberedEvents() {
    std::vector<PoolEvent> events = pool_->TakeEvents();
    for (const PoolEvent& e : events)
      FuzzCheck(e.sequence == next_event_++, "events are numbered 1, 2, 3...");
    return events;
  }

  void CheckState() {
    const std::vector<uint32_t> refs = Refs();
    BlockPoolStats expected;
    for (BlockId b = 0; b < options_.num_blocks; ++b) {
      const bool cached = CachedKeyOf(b) != nullptr;
      expected.free += refs[b] == 0 && !cached;
      expected.cached += refs[b] == 0 && cached;
    }
    for (const auto& [b, n] : holds_) expected.held += n > 0;
    const BlockPoolStats stats = pool_->Stats();
    FuzzCheck(stats.total == options_.num_blocks && stats.free == expected.free &&
                  stats.cached == expected.cached && stats.held == expected.held,
              "free, cached and held counts are the model's");
    for (const auto& [id, s] : sequences_) {
      const Result<std::vector<BlockId>> table = pool_->BlockTable(id);
      FuzzCheck(table.ok() && *table == s.table, "a sequence's block table is the model's");
      FuzzCheck(pool_->LookupPrefix(s.root, s.keys) == ModelPrefix(s.root, s.keys),
                "a lookup finds the cached chain");
    }
    CheckHoldings();
  }

  void CheckHoldings() {
    const std::vector<PoolHolding> holdings = pool_->Holdings();
    FuzzCheck(holdings.size() == cached_.size(), "holdings list every cached block");
    for (const PoolHolding& h : holdings) {
      const auto it = cached_.find(h.key);
      FuzzCheck(it != cached_.end(), "holdings list only cached blocks");
      const CachedModel& c = it->second;
      const Nanos left = c.deadline ? std::max(*c.deadline - clock_.Now(), Nanos{1}) : Nanos{0};
      FuzzCheck(h.block == c.block && h.parent == c.parent && h.first == c.first &&
                    h.salt_scope == c.scope && h.format_tag == c.format && h.priority == c.priority,
                "a holding is the block as stored, at its priority");
      FuzzCheck(h.retention_left == left, "a holding's retention left is the model's");
      FuzzCheck(h.tokens == c.tokens, "a holding keeps the tokens it was committed with");
      const std::optional<PoolHolding> found = pool_->Find(h.key);
      FuzzCheck(found && found->block == c.block && found->checksum == c.checksum,
                "Find gives the block and checksum");
    }
  }

  // The pool's window in blocks (sinks, window), as the contract counts them; full
  // attention: no sinks, no limit.
  std::pair<uint32_t, uint32_t> ModelWindow() const {
    if (options_.window_tokens == 0) return {0, UINT32_MAX};
    const uint32_t t = tpb();
    return {(options_.sink_tokens + t - 1) / t, (options_.window_tokens + t - 1) / t};
  }

  // Whether reused block i of a prefix of `matched` blocks is in the table: all of them
  // under full attention, the sinks and the last window in a windowed pool.
  bool ModelKept(uint32_t i, uint32_t matched) const {
    const auto [sinks, window] = ModelWindow();
    return i < sinks || window >= matched || i >= matched - window;
  }

  // The longest prefix the pool serves: every block cached as a chain, or (windowed) the
  // sinks and the last window of it.
  uint32_t ModelPrefix(const BlockKey& root, std::span<const BlockKey> keys) const {
    uint32_t longest = 0;
    for (uint32_t m = 1; m <= keys.size(); ++m) {
      bool served = true;
      for (uint32_t i = 0; i < m && served; ++i) {
        if (!ModelKept(i, m)) continue;
        const auto it = cached_.find(keys[i]);
        served = it != cached_.end() && it->second.parent == (i == 0 ? root : keys[i - 1]);
      }
      if (served) longest = m;
    }
    return longest;
  }

  // Keys for the full blocks of s.tokens not keyed yet: chained from the last key, as an
  // engine computes them, or now and then forged (a key repeated or a root).
  void KeyNewBlocks(FuzzChoices& in, SequenceModel& s) {
    while ((s.keys.size() + 1) * tpb() <= s.tokens.size()) {
      const BlockKey parent = s.keys.empty() ? s.root : s.keys.back();
      if (in.Below(16) == 0) {
        s.keys.push_back(in.Below(2) == 0 ? kRoots[in.Below(2)] : parent);
        continue;
      }
      const auto tokens = std::span(s.tokens).subspan(s.keys.size() * tpb(), tpb());
      s.keys.push_back(
          ChainBlockKey(parent, tokens, {.lora_id = s.format, .model_tag = {}, .extra = {}}));
    }
  }

  void Start(FuzzChoices& in);
  void CheckPartial(const SequenceModel& s, const SequenceStart& start, uint32_t matched,
                    bool passed_tokens, std::optional<BlockId>* in_place);
  void Extend(FuzzChoices& in);
  void Commit(FuzzChoices& in);
  void ApplyCommit(const SequenceModel& s, std::span<const BlockKey> keys,
                   std::span<const uint32_t> tokens, std::span<const BlockRetention> retention);
  void FreeSequence(FuzzChoices& in);
  void Allocate(FuzzChoices& in);
  void DropEach(FuzzChoices& in, std::map<BlockId, uint32_t>& counts,
                Status (BlockPool::*drop)(std::span<const BlockId>), const char* property);
  void Hold(FuzzChoices& in);
  void RememberChecksums(FuzzChoices& in);
  void Advance(FuzzChoices& in);
  std::vector<BlockId> PickBlocks(FuzzChoices& in, const std::map<BlockId, uint32_t>& likely);

  FakeClock clock_;
  BlockPoolOptions options_;
  std::unique_ptr<BlockPool> pool_;
  std::map<SequenceId, SequenceModel> sequences_;
  std::map<BlockId, uint32_t> loose_;  // references AllocateBlocks gave, per block
  std::map<BlockId, uint32_t> holds_;  // HoldBlocks and HoldForWriting, per block
  std::map<BlockKey, CachedModel> cached_;
  std::map<BlockId, BlockKey> cached_by_block_;
  uint64_t next_event_ = 1;
  BlockPoolStats before_;
  std::vector<uint32_t> refs_before_;
};

}  // namespace kvtier::worker::fuzzing
