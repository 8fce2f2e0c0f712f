// Fuzz target: a worker's BlockPool (block_pool.h) driven by a script of calls, checked
// call by call against a model of what the pool must hold.
//
// The input's first bytes shape the pool (1-12 blocks, 1-4 tokens a block, full attention
// or a window with sink tokens, partial reuse on or off, the offload threshold); each
// later choice is one call: start, extend, commit or free a sequence (four ids), allocate
// or free blocks outside sequences, hold blocks for reading or writing, release them,
// remember checksums, move the clock. Prompts come from a three-token alphabet so that
// prefixes meet; their keys are chained as an engine's are, or now and then forged (a key
// repeated, a salt's root as a block key), as an engine that gets them wrong would send.
//
// The model is the caller's side: each sequence's tokens, keys and block table, the
// references AllocateBlocks gave and the holds taken, and what is cached, from the pool's
// own events. Beyond no crash and no sanitizer report, after every call:
// - a call is refused exactly when the contract says (frees, holds, releases, commits,
//   extensions, checksums are predicted whole), and a refused call changes nothing: no
//   event, the same stats;
// - events are numbered 1, 2, 3...; a stored block's key, parent, scope, priority and
//   retention are the ones its commit gave; removals name what is cached;
// - a block handed out blank (allocated, a sequence's new block, a copy's destination) is
//   referenced by nobody and cached under no key; a victim was cached and referenced by
//   nobody; victims are offloaded exactly from the threshold up, and an allocation's
//   victims come leaves first (in a full-attention pool), lowest priority first;
// - a start reuses exactly the cached chain of its keys and, with partial reuse, the
//   cached child sharing most leading tokens with the rest of its prompt;
// - free, cached and held counts, block tables, holdings (key, parent, priority, time
//   left of retention, tokens) and checksums are the model's.
#include "services/worker/pool/block_pool_fuzz_harness.h"

namespace kvtier::worker::fuzzing {

using kvtier::testing::FuzzCheck;
using kvtier::testing::FuzzChoices;

void Harness::Start(FuzzChoices& in) {
  const SequenceId id = in.Below(kSequenceIds);
  SequenceModel s{.root = kRoots[in.Below(2)],
                  .scope = 1 + in.Below(2),
                  .format = kFormats[in.Below(2)],
                  .tokens = {},
                  .keys = {},
                  .table = {}};
  const uint32_t length = in.Below(16) == 0 ? 0 : 1 + in.Below(4 * tpb());
  for (uint32_t i = 0; i < length; ++i) s.tokens.push_back(in.Below(3));
  KeyNewBlocks(in, s);
  std::vector<BlockKey> keys = s.keys;
  if (in.Below(16) == 0) keys.push_back(kRoots[0]);  // one key too many
  const bool pass_tokens = in.Below(4) != 0 && length > 0;
  uint32_t num_tokens = pass_tokens ? 0 : length;
  if (in.Below(16) == 0) num_tokens = length + 1;  // disagrees with the tokens, or claims one more
  // As the contract reads: tokens given decide the length, and a count beside them must agree.
  const uint32_t prompt = pass_tokens ? length : num_tokens;
  const bool valid = !sequences_.contains(id) &&
                     (!pass_tokens || num_tokens == 0 || num_tokens == length) && prompt > 0 &&
                     keys.size() == prompt / tpb();
  while (s.tokens.size() < prompt) s.tokens.push_back(in.Below(3));  // the token the count claimed
  const uint32_t matched = ModelPrefix(s.root, keys);
  const SequenceRequest request{
      .id = id,
      .root = s.root,
      .salt_scope = s.scope,
      .format_tag = s.format,
      .block_keys = keys,
      .tokens = pass_tokens ? std::span<const uint32_t>(s.tokens) : std::span<const uint32_t>(),
      .num_tokens = num_tokens};
  Result<SequenceStart> start = pool_->StartSequence(request);
  if (!start.ok()) {
    FuzzCheck(start.status().code() == StatusCode::kResourceExhausted ? valid : !valid,
              "a start is refused for a bad request, or for want of blocks");
    return CheckRefused();
  }
  FuzzCheck(valid, "a bad start is refused");
  s.keys = keys;  // what the pool was told, a claimed key included
  const uint32_t needed = (prompt + tpb() - 1) / tpb();
  FuzzCheck(start->block_table.size() == needed,
            "a start's table has a block per block of its prompt");
  FuzzCheck(start->reused_blocks == matched, "a start reuses exactly the cached chain of its keys");
  for (uint32_t i = 0; i < matched; ++i) {
    FuzzCheck(ModelKept(i, matched) ? start->block_table[i] == cached_.at(keys[i]).block
                                    : start->block_table[i] == kNoBlock,
              "a reused block is the one cached under its key; a windowed reuse skips the rest");
  }
  std::optional<BlockId> in_place;
  CheckPartial(s, *start, matched, pass_tokens, &in_place);
  ApplyEvictions(start->evicted, in_place, /*check_order=*/false);
  std::set<BlockId> blank;
  for (uint32_t i = 0; i < matched; ++i) {
    if (ModelKept(i, matched))
      blank.insert(start->block_table[i]);  // a forged chain may repeat one
  }
  if (start->copy) blank.insert(start->copy->source);
  CheckBlank(std::span(start->block_table).subspan(matched + (in_place ? 1 : 0)), &blank);
  s.table = start->block_table;
  sequences_.emplace(id, std::move(s));
  CheckState();
}

// The start's partial reuse: the cached child of the last matched key (same format) whose
// tokens lead the rest of the prompt longest, copied or (unreferenced) taken in place.
void Harness::CheckPartial(const SequenceModel& s, const SequenceStart& start, uint32_t matched,
                           bool passed_tokens, std::optional<BlockId>* in_place) {
  const uint32_t partial = start.reused_tokens - matched * tpb();
  FuzzCheck(start.reused_tokens >= matched * tpb(), "a start counts its reused blocks' tokens");
  const BlockKey parent = matched == 0 ? s.root : s.keys[matched - 1];
  const auto rest =
      std::span(s.tokens).subspan(std::min<size_t>(s.tokens.size(), size_t{matched} * tpb()));
  uint32_t best = 0;
  if (options_.partial_reuse && passed_tokens) {
    for (const auto& [key, c] : cached_) {
      if (c.parent == parent && c.format == s.format && !c.tokens.empty())
        best = std::max(best, CommonLead(rest, c.tokens));
    }
  }
  FuzzCheck(partial == best, "a start reuses the cached child sharing most leading tokens");
  if (partial == 0) {
    FuzzCheck(!start.copy.has_value(), "no partial reuse, no copy");
    return;
  }
  const BlockId source = start.copy ? start.copy->source : start.block_table[matched];
  const BlockKey* key = CachedKeyOf(source);
  FuzzCheck(key != nullptr, "a partial reuse's source was cached");
  const CachedModel& c = cached_.at(*key);
  FuzzCheck(c.parent == parent && c.format == s.format && CommonLead(rest, c.tokens) == partial,
            "a partial reuse's source is a child of the matched chain sharing its tokens");
  if (start.copy) {
    FuzzCheck(
        start.copy->destination == start.block_table[matched] && start.copy->tokens == partial,
        "a partial copy lands in the block after the matched chain");
  } else {
    *in_place = source;
  }
}

void Harness::Extend(FuzzChoices& in) {
  const SequenceId id = in.Below(kSequenceIds);
  const uint32_t added = in.Below(2 * tpb() + 1);
  const auto it = sequences_.find(id);
  const uint32_t blank =
      it == sequences_.end()
          ? 0
          : static_cast<uint32_t>((it->second.tokens.size() + added + tpb() - 1) / tpb() -
                                  it->second.table.size());
  const Result<SequenceGrowth> growth = pool_->Extend(id, added);
  if (!growth.ok()) {
    FuzzCheck(it == sequences_.end() || blank > Available(),
              "an extension is refused only for want of blocks");
    return CheckRefused();
  }
  FuzzCheck(it != sequences_.end() && blank <= Available(),
            "an extension needing more blocks than left is refused");
  SequenceModel& s = it->second;
  FuzzCheck(growth->new_blocks.size() == blank, "an extension adds the blocks its tokens need");
  ApplyEvictions(growth->evicted, std::nullopt, /*check_order=*/false);
  std::set<BlockId> seen;
  CheckBlank(growth->new_blocks, &seen);
  s.table.insert(s.table.end(), growth->new_blocks.begin(), growth->new_blocks.end());
  for (uint32_t i = 0; i < added; ++i) s.tokens.push_back(in.Below(3));
  KeyNewBlocks(in, s);
  std::vector<BlockId> released;
  // What the first token added (at position `old`) attends stays: [old + 1 - window, old].
  const size_t old = s.tokens.size() - added;
  if (options_.window_tokens != 0 && old + 1 > options_.window_tokens) {
    const size_t sinks = (options_.sink_tokens + tpb() - 1) / tpb();
    const size_t out = (old + 1 - options_.window_tokens) / tpb();
    for (size_t i = sinks; i < out; ++i) {
      if (s.table[i] != kNoBlock) released.push_back(std::exchange(s.table[i], kNoBlock));
    }
  }
  FuzzCheck(growth->released == released,
            "a windowed sequence releases exactly the blocks that left its window");
  CheckState();
}

void Harness::Commit(FuzzChoices& in) {
  const SequenceId id = in.Below(kSequenceIds);
  const auto it = sequences_.find(id);
  static const SequenceModel kNone;
  const SequenceModel& s = it == sequences_.end() ? kNone : it->second;
  const size_t full = s.tokens.size() / tpb();
  const size_t count = in.Below(
      static_cast<uint32_t>(std::min<size_t>(full, 250) + 2));  // one more than full at times
  std::vector<BlockKey> keys(s.keys.begin(), s.keys.begin() + std::min(count, s.keys.size()));
  while (keys.size() < count) keys.push_back(kRoots[1]);
  if (!keys.empty() && in.Below(8) == 0)
    keys[in.Below(static_cast<uint32_t>(std::min<size_t>(keys.size(), 256)))] = kRoots[0];
  std::vector<uint32_t> tokens;
  if (const uint32_t mode = in.Below(3); mode != 0) {
    tokens.assign(s.tokens.begin(), s.tokens.begin() + std::min(s.tokens.size(), count * tpb()));
    if (mode == 2 && !tokens.empty()) tokens.pop_back();  // one short
  }
  std::vector<BlockRetention> retention;
  if (in.Below(2) == 1) {
    const size_t entries = count + (in.Below(16) == 0 ? 1 : 0);
    for (size_t i = 0; i < entries; ++i) {
      retention.push_back(
          {static_cast<uint8_t>(in.Below(102)), std::chrono::milliseconds(100 * in.Below(4))});
    }
  }
  bool valid = it != sequences_.end() && count <= full &&
               (tokens.empty() || tokens.size() >= count * tpb()) &&
               (retention.empty() || retention.size() == count);
  for (const BlockRetention& r : retention) valid = valid && r.priority <= kvtier::kMaxPriority;
  for (size_t i = 0; valid && i < count; ++i) {
    const BlockKey* cached = s.table[i] == kNoBlock ? nullptr : CachedKeyOf(s.table[i]);
    valid = cached == nullptr || *cached == keys[i];
  }
  const Status status = pool_->Commit(id, keys, tokens, retention);
  CheckOutcome(status, valid, "a commit is refused exactly when its request is bad");
  if (!status.ok()) return;
  ApplyCommit(s, keys, tokens, retention);
  CheckState();
}

// A commit's events, predicted whole: a stored event per blank block whose key nothing
// caches yet, in order; blocks already committed take the new retention.
void Harness::ApplyCommit(const SequenceModel& s, std::span<const BlockKey> keys,
                          std::span<const uint32_t> tokens,
                          std::span<const BlockRetention> retention) {
  const std::vector<PoolEvent> events = TakeNumberedEvents();
  size_t next = 0;
  BlockKey parent = s.root;
  for (size_t i = 0; i < keys.size(); parent = keys[i], ++i) {
    const BlockId b = s.table[i];
    const BlockRetention r = retention.empty() ? BlockRetention{} : retention[i];
    const std::optional<Nanos> deadline = r.duration.count() > 0 && r.priority != kDefaultPriority
                                              ? std::optional(clock_.Now() + r.duration)
                                              : std::nullopt;
    if (b == kNoBlock) continue;
    if (const BlockKey* key = CachedKeyOf(b); key != nullptr) {
      if (!retention.empty()) {
        cached_.at(*key).priority = r.priority;
        cached_.at(*key).deadline = deadline;
      }
      continue;
    }
    if (cached_.contains(keys[i])) continue;  // the same content is cached in another block
    FuzzCheck(next < events.size(), "a commit stores each new block");
    const PoolEvent& e = events[next++];
    FuzzCheck(e.kind == PoolEvent::Kind::kStored && e.block == b && e.key == keys[i] &&
                  e.parent == parent && e.first == (parent == s.root) && e.priority == r.priority &&
                  e.salt_scope == s.scope && e.retention == (deadline ? r.duration : Nanos{0}),
              "a stored event is the block as committed");
    std::vector<uint32_t> kept;
    if (options_.partial_reuse && !tokens.empty())
      kept.assign(tokens.begin() + i * tpb(), tokens.begin() + (i + 1) * tpb());
    cached_.emplace(keys[i], CachedModel{.block = b,
                                         .parent = parent,
                                         .first = parent == s.root,
                                         .scope = s.scope,
                                         .format = s.format,
                                         .priority = r.priority,
                                         .deadline = deadline,
                                         .tokens = std::move(kept),
                                         .checksum = 0,
                                         .parent_block = std::nullopt});
    if (const auto p = cached_.find(parent);
        options_.window_tokens == 0 && p != cached_.end() && !(p->first == keys[i])) {
      cached_.at(keys[i]).parent_block = p->second.block;
    }
    cached_by_block_.emplace(b, keys[i]);
  }
  FuzzCheck(next == events.size(), "a commit emits nothing but its stored blocks");
}

void Harness::FreeSequence(FuzzChoices& in) {
  const SequenceId id = in.Below(kSequenceIds);
  const bool exists = sequences_.erase(id) == 1;
  CheckOutcome(pool_->FreeSequence(id), exists, "a sequence is freed exactly when it exists");
  FuzzCheck(pool_->TakeEvents().empty(), "freeing a sequence emits nothing");
  CheckState();
}

void Harness::Allocate(FuzzChoices& in) {
  const uint32_t count = in.Below(4);
  std::vector<BlockId> blocks;
  std::vector<EvictedBlock> evicted;
  const Status status = pool_->AllocateBlocks(count, &blocks, &evicted);
  CheckOutcome(status, count <= Available(),
               "an allocation is refused exactly when too few blocks are left");
  if (!status.ok()) return;
  FuzzCheck(blocks.size() == count, "an allocation gives what it was asked");
  ApplyEvictions(evicted, std::nullopt, /*check_order=*/true);
  std::set<BlockId> seen;
  CheckBlank(blocks, &seen);
  for (const BlockId b : blocks) ++loose_[b];
  CheckState();
}

// Up to three block ids: mostly from `likely`, sometimes any id, one past the pool at times.
std::vector<BlockId> Harness::PickBlocks(FuzzChoices& in,
                                         const std::map<BlockId, uint32_t>& likely) {
  std::vector<BlockId> blocks(1 + in.Below(3));
  for (BlockId& b : blocks) {
    if (!likely.empty() && in.Below(4) != 0) {
      b = std::next(likely.begin(), in.Below(static_cast<uint32_t>(likely.size())))->first;
    } else {
      b = in.Below(options_.num_blocks + 1);
    }
  }
  return blocks;
}

// Drops `blocks` from `counts`, one per listing; false (and no change) when a block is
// out of range or listed more often than counted.
bool Drop(std::map<BlockId, uint32_t>& counts, std::span<const BlockId> blocks,
          uint32_t num_blocks) {
  std::map<BlockId, uint32_t> after = counts;
  for (const BlockId b : blocks) {
    if (b >= num_blocks || after[b] == 0) return false;
    if (--after[b] == 0) after.erase(b);
  }
  counts = std::move(after);
  return true;
}

// FreeBlocks and ReleaseBlocks: each listed block drops one of the model's `counts`
// (AllocateBlocks' references, holds); refused exactly when one has none left to drop.
void Harness::DropEach(FuzzChoices& in, std::map<BlockId, uint32_t>& counts,
                       Status (BlockPool::*drop)(std::span<const BlockId>), const char* property) {
  const std::vector<BlockId> blocks = PickBlocks(in, counts);
  const bool drops = Drop(counts, blocks, options_.num_blocks);
  CheckOutcome(((*pool_).*drop)(blocks), drops, property);
  FuzzCheck(pool_->TakeEvents().empty(), "a free or a release emits nothing");
  CheckState();
}

void Harness::Hold(FuzzChoices& in) {
  const bool for_writing = in.Below(2) == 1;
  std::map<BlockId, uint32_t> likely;
  if (for_writing) {
    for (const auto& [id, s] : sequences_) {
      for (const BlockId b : s.table) {
        if (b != kNoBlock && CachedKeyOf(b) == nullptr) likely[b] = 1;
      }
    }
  } else {
    for (const auto& [b, key] : cached_by_block_) likely[b] = 1;
  }
  const std::vector<BlockId> blocks = PickBlocks(in, likely);
  bool valid = true;
  for (const BlockId b : blocks) {
    const bool cached = b < options_.num_blocks && CachedKeyOf(b) != nullptr;
    const uint32_t held = holds_.contains(b) ? holds_.at(b) : 0;
    valid = valid && b < options_.num_blocks &&
            (for_writing ? !cached && refs_before_[b] > held : cached);
  }
  const Status status = for_writing ? pool_->HoldForWriting(blocks) : pool_->HoldBlocks(blocks);
  CheckOutcome(status, valid,
               for_writing
                   ? "a hold for writing takes exactly blank blocks that something references"
                   : "a hold for reading takes exactly committed blocks");
  if (!status.ok()) return;
  for (const BlockId b : blocks) ++holds_[b];
  FuzzCheck(pool_->TakeEvents().empty(), "a hold emits nothing");
  CheckState();
}

void Harness::RememberChecksums(FuzzChoices& in) {
  const std::vector<BlockId> blocks = PickBlocks(in, holds_);
  std::vector<uint64_t> checksums(blocks.size() + (in.Below(16) == 0 ? 1 : 0));
  for (uint64_t& c : checksums) c = in.Below(4);  // 0 at times: remembers nothing
  const bool valid =
      checksums.size() == blocks.size() &&
      std::all_of(blocks.begin(), blocks.end(), [&](BlockId b) { return b < options_.num_blocks; });
  const Status status = pool_->RememberChecksums(blocks, checksums);
  CheckOutcome(status, valid,
               "checksums are refused exactly for a size mismatch or a foreign block");
  if (!status.ok()) return;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockKey* key = CachedKeyOf(blocks[i]);
    if (key != nullptr && holds_.contains(blocks[i]) && checksums[i] != 0)
      cached_.at(*key).checksum = checksums[i];
  }
  CheckState();
}

void Harness::Advance(FuzzChoices& in) {
  clock_.Advance(std::chrono::milliseconds(100 * in.Below(4)));
  pool_->AdvanceTime();
  for (auto& [key, c] : cached_) {
    if (c.deadline && *c.deadline <= clock_.Now()) {
      c.priority = kDefaultPriority;
      c.deadline.reset();
    }
  }
  FuzzCheck(pool_->TakeEvents().empty(), "time passing emits nothing");
  CheckState();
}

}  // namespace kvtier::worker::fuzzing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvtier::testing::FuzzChoices in(data, size);
  kvtier::worker::fuzzing::Harness harness(in);
  while (!in.done()) harness.Step(in);
  return 0;
}
