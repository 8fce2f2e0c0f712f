// A fleet of simulated inference engines for `kvtier replay --engines N`: what each engine's
// GPU prefix cache holds as requests come, and the KV events it publishes about it, in the
// engines' own wire format (vLLM, SGLang, TensorRT-LLM: services/coordinator/engines).
//
// SimulatedEngine keeps `capacity` blocks as vLLM's prefix cache does: a request reuses the
// longest prefix of its blocks that is cached, computes the rest, and when it finishes its
// blocks join the free queue tail first (so an evicted chain loses its leaves before its
// root); room is taken from the queue's least recently used end. Blocks are the trace's
// hash ids, which are prefix-chained (an id names its whole prefix), and serve as the
// engine's block hashes.
//
// Thread safety: none; one replay thread. Pure logic: no sockets, no clock.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvtier::bench {

// Consecutive blocks a request stored, under the block before the first (none: the
// chain's first block).
struct StoredRun {
  std::optional<uint64_t> parent;
  std::vector<uint64_t> blocks;
};

struct EngineStep {
  bool cleared = false;           // the engine dropped everything first (AllBlocksCleared)
  uint32_t hit_blocks = 0;        // leading blocks of the request found cached
  std::vector<StoredRun> stored;  // what the request computed and the cache now holds
  std::vector<uint64_t> removed;  // what was evicted to make room, in eviction order
};

class SimulatedEngine {
 public:
  // REQUIRES: capacity >= 1.
  explicit SimulatedEngine(size_t capacity) : capacity_(capacity) {}

  // Serves a request whose prompt is `blocks` (trace hash ids, in order).
  EngineStep Serve(std::span<const uint64_t> blocks);
  size_t size() const { return where_.size(); }
  bool Holds(uint64_t block) const { return where_.contains(block); }

 private:
  size_t capacity_;
  std::list<uint64_t> lru_;  // least recently used first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where_;
};

enum class EventWire { kArray, kMap };  // tagged arrays (vLLM, TensorRT-LLM) or maps (SGLang)

// The tokens of trace block `id`: `tokens_per_block` ids derived from it, so that equal
// ids give equal tokens and different ids almost surely different ones.
std::vector<uint32_t> SyntheticTokens(uint64_t id, uint32_t tokens_per_block);
// A prompt of the blocks `ids`: their SyntheticTokens one after another.
std::vector<uint32_t> SyntheticPrompt(std::span<const uint64_t> ids, uint32_t tokens_per_block);

// One engine message's payload: a msgpack EventBatch [ts, events, dp_rank] of the step's
// AllBlocksCleared, BlockStored (token_ids from SyntheticTokens, medium GPU) and
// BlockRemoved events, in that order.
std::string EncodeEventBatch(const EngineStep& step, uint32_t tokens_per_block, EventWire wire,
                             double ts);

}  // namespace kvtier::bench
