#include "services/bench/engine_fleet.h"

#include <msgpack.hpp>

namespace kvtier::bench {

EngineStep SimulatedEngine::Serve(std::span<const uint64_t> blocks) {
  EngineStep step;
  while (step.hit_blocks < blocks.size() && where_.contains(blocks[step.hit_blocks]))
    ++step.hit_blocks;
  // What the request computes: every block not cached, in runs under the block before.
  for (size_t i = step.hit_blocks; i < blocks.size(); ++i) {
    if (where_.contains(blocks[i])) continue;
    if (step.stored.empty() || i == 0 || blocks[i - 1] != step.stored.back().blocks.back()) {
      step.stored.push_back({i == 0 ? std::nullopt : std::optional(blocks[i - 1]), {}});
    }
    step.stored.back().blocks.push_back(blocks[i]);
  }
  // The request's blocks go to the free queue's recent end, its last block first.
  for (size_t i = blocks.size(); i-- > 0;) {
    if (const auto it = where_.find(blocks[i]); it != where_.end()) lru_.erase(it->second);
    where_[blocks[i]] = lru_.insert(lru_.end(), blocks[i]);
  }
  while (where_.size() > capacity_) {
    const uint64_t victim = lru_.front();
    lru_.pop_front();
    where_.erase(victim);
    step.removed.push_back(victim);
  }
  return step;
}

std::vector<uint32_t> SyntheticTokens(uint64_t id, uint32_t tokens_per_block) {
  std::vector<uint32_t> tokens(tokens_per_block);
  for (uint32_t j = 0; j < tokens_per_block; ++j) {
    uint64_t x = id * 0x9E3779B97F4A7C15ULL + j + 1;  // splitmix64
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    tokens[j] = static_cast<uint32_t>((x ^ (x >> 31)) % 128000);  // a vocabulary's range
  }
  return tokens;
}

std::vector<uint32_t> SyntheticPrompt(std::span<const uint64_t> ids, uint32_t tokens_per_block) {
  std::vector<uint32_t> tokens;
  tokens.reserve(ids.size() * tokens_per_block);
  for (uint64_t id : ids) {
    const std::vector<uint32_t> block = SyntheticTokens(id, tokens_per_block);
    tokens.insert(tokens.end(), block.begin(), block.end());
  }
  return tokens;
}

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

// Starts an event of `fields` fields after its tag: ["Tag", ...] or {"type": "Tag", ...}.
void Begin(Packer& p, EventWire wire, const char* tag, uint32_t fields) {
  if (wire == EventWire::kArray) {
    p.pack_array(fields + 1);
  } else {
    p.pack_map(fields + 1);
    p.pack("type");
  }
  p.pack(tag);
}

void Field(Packer& p, EventWire wire, const char* name) {
  if (wire == EventWire::kMap) p.pack(name);
}

}  // namespace

// Field order is vLLM's BlockStored / BlockRemoved declaration order (the array form's).
std::string EncodeEventBatch(const EngineStep& step, uint32_t tokens_per_block, EventWire wire,
                             double ts) {
  msgpack::sbuffer buffer;
  Packer p(buffer);
  p.pack_array(3);
  p.pack(ts);
  p.pack_array(static_cast<uint32_t>((step.cleared ? 1 : 0) + step.stored.size() +
                                     (step.removed.empty() ? 0 : 1)));
  if (step.cleared) Begin(p, wire, "AllBlocksCleared", 0);
  for (const StoredRun& run : step.stored) {
    Begin(p, wire, "BlockStored", 6);
    Field(p, wire, "block_hashes");
    p.pack(run.blocks);
    Field(p, wire, "parent_block_hash");
    if (run.parent) {
      p.pack(*run.parent);
    } else {
      p.pack_nil();
    }
    Field(p, wire, "token_ids");
    p.pack_array(static_cast<uint32_t>(run.blocks.size() * tokens_per_block));
    for (uint64_t block : run.blocks) {
      for (uint32_t token : SyntheticTokens(block, tokens_per_block)) p.pack(token);
    }
    Field(p, wire, "block_size");
    p.pack(tokens_per_block);
    Field(p, wire, "lora_id");
    p.pack_nil();
    Field(p, wire, "medium");
    p.pack("GPU");
  }
  if (!step.removed.empty()) {
    Begin(p, wire, "BlockRemoved", 2);
    Field(p, wire, "block_hashes");
    p.pack(step.removed);
    Field(p, wire, "medium");
    p.pack("GPU");
  }
  p.pack(0);  // dp rank
  return std::string(buffer.data(), buffer.size());
}

}  // namespace kvtier::bench
