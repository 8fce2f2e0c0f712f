#include "services/coordinator/engines/engine_blocks.h"

#include <algorithm>

#include "fmt/format.h"

namespace kvtier::coordinator {
namespace {

constexpr std::string_view kLoraPrefix = "lora:";

KvEvent Event(KvEvent::Kind kind, Tier tier = Tier::kGpu,
              std::optional<BlockKey> parent = std::nullopt) {
  KvEvent e;
  e.kind = kind;
  e.tier = tier;
  e.parent = parent;
  return e;
}

uint8_t Bit(Tier tier) { return static_cast<uint8_t>(1u << static_cast<uint8_t>(tier)); }

BlockExtraKeys KeyExtras(uint64_t lora_id, const std::string& model, const std::string& lora_name,
                         std::span<const std::string> extras) {
  BlockExtraKeys ex;
  ex.lora_id = lora_name.empty() ? lora_id : 0;
  ex.model_tag = model;
  if (!lora_name.empty()) ex.extra.push_back(std::string(kLoraPrefix) + lora_name);
  ex.extra.insert(ex.extra.end(), extras.begin(), extras.end());
  return ex;
}

}  // namespace

std::vector<BlockKey> EnginePromptKeys(const EngineKeySpace& space,
                                       std::span<const uint32_t> tokens,
                                       const EnginePrompt& prompt) {
  std::vector<BlockKey> keys =
      ComputeBlockKeys(prompt.cache_salt, tokens, space.tokens_per_block,
                       KeyExtras(prompt.lora_id, space.model, prompt.lora_name, {}));
  space.tenant.ApplyInPlace(keys);
  return keys;
}

std::optional<Tier> TierOfMedium(std::string_view medium) {
  if (medium.empty() || medium == "GPU") return Tier::kGpu;
  if (medium == "CPU" || medium == "CPU_PINNED" || medium == "CPU_TIER1" || medium == "CPU_TIER2")
    return Tier::kHost;
  if (medium == "DISK" || medium == "STORAGE") return Tier::kDisk;
  return std::nullopt;
}

EngineBlockMap::EngineBlockMap(Options options) : options_(std::move(options)) {}

void EngineBlockMap::Apply(const EngineEvent& event, std::vector<KvEvent>& out) {
  if (const auto* stored = std::get_if<EngineBlockStored>(&event)) {
    Store(*stored, out);
  } else if (const auto* removed = std::get_if<EngineBlockRemoved>(&event)) {
    Remove(*removed, out);
  } else {
    Clear();
    ++stats_.cleared;
    out.push_back(Event(KvEvent::Kind::kCleared));
  }
}

void EngineBlockMap::Clear() {
  entries_.clear();
  held_.clear();
}

std::vector<std::string> EngineBlockMap::BlockExtras(const EngineBlockStored& stored, size_t i,
                                                     bool chain_root,
                                                     std::string* cache_salt) const {
  std::vector<std::string> extras;
  if (i < stored.extra_keys.size()) {
    for (const std::string& e : stored.extra_keys[i]) {
      if (!stored.lora_name.empty() && e == stored.lora_name) continue;
      extras.push_back(e);
    }
  }
  // vLLM appends a request's cache_salt to the extra keys of its first block
  // only.
  if (chain_root && cache_salt != nullptr && cache_salt->empty() &&
      options_.format == EngineFormat::kVllm) {
    auto last_text = std::find_if(extras.rbegin(), extras.rend(), [](const std::string& e) {
      return !e.empty() && e.front() != '\x1f';
    });
    if (last_text != extras.rend()) {
      *cache_salt = *last_text;
      extras.erase(std::next(last_text).base());
    }
  } else if (chain_root && cache_salt != nullptr && !cache_salt->empty()) {
    std::erase(extras, *cache_salt);
  }
  return extras;
}

std::optional<EngineBlockMap::Chain> EngineBlockMap::StartChain(const EngineBlockStored& stored,
                                                                std::string_view cache_salt) const {
  if (!stored.parent.has_value()) return Chain{.parent = RootKey(cache_salt)};
  auto it = entries_.find(EntryKey{stored.group, *stored.parent});
  if (it == entries_.end()) return std::nullopt;
  return it->second.chain;
}

void EngineBlockMap::Extend(const EngineBlockStored& stored, size_t i,
                            std::span<const std::string> extras, Chain& chain, Entry& entry) const {
  const uint32_t tpb = options_.space.tokens_per_block;
  const size_t begin = i * stored.block_size;
  chain.pending_extra.insert(chain.pending_extra.end(), extras.begin(), extras.end());
  auto text = std::lower_bound(stored.text_tokens.begin(), stored.text_tokens.end(), begin,
                               [](const auto& t, size_t pos) { return t.first < pos; });
  for (size_t p = begin; p < begin + stored.block_size; ++p) {
    if (text != stored.text_tokens.end() && text->first == p) {
      chain.pending_extra.push_back(fmt::format("\x1ft{}:{}", chain.pending.size(), text->second));
      ++text;
    }
    chain.pending.push_back(stored.tokens[p]);
    if (chain.pending.size() < tpb) continue;
    const BlockKey key = ChainBlockKey(chain.parent, chain.pending,
                                       KeyExtras(stored.lora_id.value_or(0), options_.space.model,
                                                 stored.lora_name, chain.pending_extra));
    if (entry.keys.empty() && !chain.at_root) entry.first_parent = chain.salted_parent;
    const BlockKey salted = options_.space.tenant.Apply(key);
    entry.keys.push_back(salted);
    entry.key_tokens.insert(entry.key_tokens.end(), chain.pending.begin(), chain.pending.end());
    chain.parent = key;
    chain.salted_parent = salted;
    chain.at_root = false;
    chain.pending.clear();
    chain.pending_extra.clear();
  }
}

void EngineBlockMap::Store(const EngineBlockStored& stored, std::vector<KvEvent>& out) {
  const size_t n = stored.hashes.size();
  if (stored.remote) {
    stats_.remote_skipped += n;
    return;
  }
  const std::optional<Tier> tier = TierOfMedium(stored.medium);
  if (!tier.has_value()) {
    stats_.unknown_medium += n;
    return;
  }
  std::string cache_salt = stored.cache_salt;
  // The first block's extras name the chain's cache salt (vLLM), which the root
  // depends on.
  std::vector<std::string> first_extras =
      BlockExtras(stored, 0, !stored.parent.has_value(), &cache_salt);
  std::optional<Chain> chain = StartChain(stored, cache_salt);
  if (!chain.has_value()) {
    stats_.unknown_parent += n;
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const EntryKey id{stored.group, stored.hashes[i]};
    auto it = entries_.find(id);
    if (it != entries_.end()) {
      // Known already (another tier, or a repeat): its chain is the one to go
      // on from.
      Hold(it->second, *tier, out);
      chain = it->second.chain;
      ++stats_.stored_blocks;
      continue;
    }
    if (entries_.size() >= options_.max_blocks) {
      stats_.full_skipped += n - i;
      return;
    }
    Entry entry(&memory_);
    const std::vector<std::string> extras =
        i == 0 ? first_extras : BlockExtras(stored, i, false, nullptr);
    Extend(stored, i, extras, *chain, entry);
    entry.chain = *chain;
    Hold(entries_.emplace(id, std::move(entry)).first->second, *tier, out);
    ++stats_.stored_blocks;
  }
}

void EngineBlockMap::Hold(Entry& entry, Tier tier, std::vector<KvEvent>& out) {
  if ((entry.tiers & Bit(tier)) != 0) return;
  entry.tiers |= Bit(tier);
  const uint32_t tpb = options_.space.tokens_per_block;
  for (size_t k = 0; k < entry.keys.size(); ++k) {
    if (held_[{entry.keys[k], static_cast<uint8_t>(tier)}]++ != 0) continue;
    // Extends the previous stored event where this key continues its chain.
    const std::optional<BlockKey> parent =
        k == 0 ? entry.first_parent : std::optional<BlockKey>(entry.keys[k - 1]);
    const bool continues = !out.empty() && out.back().kind == KvEvent::Kind::kStored &&
                           out.back().tier == tier && parent.has_value() &&
                           out.back().keys.back() == *parent;
    if (!continues) out.push_back(Event(KvEvent::Kind::kStored, tier, parent));
    out.back().keys.push_back(entry.keys[k]);
    out.back().tokens.insert(out.back().tokens.end(), entry.key_tokens.begin() + k * tpb,
                             entry.key_tokens.begin() + (k + 1) * tpb);
  }
}

void EngineBlockMap::Remove(const EngineBlockRemoved& removed, std::vector<KvEvent>& out) {
  if (removed.remote) {
    stats_.remote_skipped += removed.hashes.size();
    return;
  }
  const std::optional<Tier> tier = TierOfMedium(removed.medium);
  if (!tier.has_value()) {
    stats_.unknown_medium += removed.hashes.size();
    return;
  }
  KvEvent gone = Event(KvEvent::Kind::kRemoved, *tier);
  for (const EngineHash& hash : removed.hashes) {
    auto it = entries_.find(EntryKey{removed.group, hash});
    if (it == entries_.end() || (it->second.tiers & Bit(*tier)) == 0) {
      ++stats_.unknown_removed;
      continue;
    }
    Entry& entry = it->second;
    entry.tiers &= static_cast<uint8_t>(~Bit(*tier));
    for (const BlockKey& key : entry.keys) {
      auto held = held_.find({key, static_cast<uint8_t>(*tier)});
      if (held == held_.end() || --held->second != 0) continue;
      held_.erase(held);
      gone.keys.push_back(key);
    }
    if (entry.tiers == 0) entries_.erase(it);
    ++stats_.removed_blocks;
  }
  if (!gone.keys.empty()) out.push_back(std::move(gone));
}

std::vector<SnapshotBlock> EngineBlockMap::Snapshot() const {
  std::vector<SnapshotBlock> blocks;
  const uint32_t tpb = options_.space.tokens_per_block;
  std::unordered_map<std::pair<BlockKey, uint8_t>, bool, HeldKeyHash> listed;  // groups share keys
  for (const auto& [id, entry] : entries_) {
    for (uint8_t t = 0; t < kTierCount; ++t) {
      if ((entry.tiers & (1u << t)) == 0) continue;
      for (size_t k = 0; k < entry.keys.size(); ++k) {
        if (!listed.emplace(std::pair(entry.keys[k], t), true).second) continue;
        SnapshotBlock& b = blocks.emplace_back();
        b.key = entry.keys[k];
        b.parent = k == 0 ? entry.first_parent : std::optional<BlockKey>(entry.keys[k - 1]);
        b.tier = static_cast<Tier>(t);
        b.tokens.assign(entry.key_tokens.begin() + k * tpb,
                        entry.key_tokens.begin() + (k + 1) * tpb);
      }
    }
  }
  return blocks;
}

}  // namespace kvtier::coordinator
