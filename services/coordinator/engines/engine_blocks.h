// EngineBlockMap: one engine instance's prefix cache, as kvtier's index holds
// it.
//
// Engines hash their blocks their own way (vLLM's sha256 or builtin hash,
// SGLang's and TensorRT-LLM's 64-bit ids), so kvtier derives its own chained
// keys from the blocks' tokens, exactly as an SDK client of the engine's tenant
// would (EnginePromptKeys): a gateway that tokenizes a prompt then finds the
// engine's blocks by kvtier's lookup. The map remembers, for each (group,
// engine hash), the kvtier chain it ends on, so that removals and children
// (which name only engine hashes) find their kvtier keys.
//
// Key derivation, for a chain of engine blocks from its root:
//   parent of kvtier block 0  = RootKey(cache_salt)
//   kvtier block j            = ChainBlockKey(parent, its tokens_per_block
//   tokens,
//                               {lora_id, model, ["lora:" + lora_name]? + other
//                               extras})
// then salted by the tenant's KeySalt, as the servers salt an SDK client's
// keys. The cache salt is the event's `cache_salt`, or for vLLM the last string
// extra key of a chain's first block (vLLM appends the request's cache_salt
// there); lora_name elements of extra keys are dropped (they enter once, as
// "lora:" + name). Any other extra keys (multimodal hashes) enter the kvtier
// block that holds them, so a text-only lookup never matches them.
//
// Block sizes: the engine's block_size need not be the key space's
// tokens_per_block. Tokens carry over from block to block, and an engine block
// completes as many kvtier blocks as its tokens finish (a 64-token engine block
// is four 16-token kvtier blocks; sixteen 1-token SGLang pages make one). A
// kvtier block belongs to the engine block that completed it: its removal
// removes the kvtier block (engines evict leaves first, so that is the deepest
// of the engine blocks it spans).
//
// Tiers: `medium` GPU (or none) is the gpu tier; CPU, CPU_PINNED, CPU_TIER1/2
// host; DISK, STORAGE disk. The same block may sit in several tiers (offloaded
// copies); a kvtier key is reported stored in a tier while any group holds it
// there. Blocks of locality REMOTE are skipped: they are another instance's.
//
// Thread safety: none; one thread owns a map.
#pragma once

#include <cstdint>
#include <memory_resource>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/block_key.h"
#include "services/coordinator/cluster/coordinator.h"
#include "services/coordinator/engines/engine_event.h"

namespace kvtier::coordinator {

// Where an engine's blocks land: its tenant's key space, model and kvtier block
// size.
struct EngineKeySpace {
  KeySalt tenant = {};
  std::string model = {};
  uint32_t tokens_per_block = 16;
};

// What a prompt adds to its tokens: what a gateway names in a lookup.
struct EnginePrompt {
  std::string cache_salt = {};
  std::string lora_name = {};
  uint64_t lora_id = 0;
};

// The salted kvtier keys of a prompt's full blocks, as the engines of `space`
// store them. REQUIRES: space.tokens_per_block > 0.
[[nodiscard]] std::vector<BlockKey> EnginePromptKeys(const EngineKeySpace& space,
                                                     std::span<const uint32_t> tokens,
                                                     const EnginePrompt& prompt);

// The tier an engine's `medium` names; nullopt for one kvtier does not know.
[[nodiscard]] std::optional<Tier> TierOfMedium(std::string_view medium);

struct EngineMapStats {
  uint64_t stored_blocks = 0;    // engine blocks stored (in some tier)
  uint64_t removed_blocks = 0;   // engine blocks removed from a tier
  uint64_t unknown_parent = 0;   // stored blocks whose parent the map does not hold: left out
  uint64_t unknown_removed = 0;  // removals of blocks the map does not hold (in that tier)
  uint64_t remote_skipped = 0;   // blocks of locality REMOTE
  uint64_t unknown_medium = 0;   // blocks of a medium kvtier does not know
  uint64_t full_skipped = 0;     // stored blocks left out: the map is at max_blocks
  uint64_t cleared = 0;          // AllBlocksCleared
};

class EngineBlockMap {
 public:
  struct Options {
    EngineKeySpace space = {};
    EngineFormat format = EngineFormat::kVllm;
    size_t max_blocks = size_t{1} << 22;  // engine blocks remembered at most
  };
  // REQUIRES: options.space.tokens_per_block > 0.
  explicit EngineBlockMap(Options options);

  // Appends the index events that `event` makes (salted keys, scope 0: the
  // caller sets the tenant's) to `out`.
  void Apply(const EngineEvent& event, std::vector<KvEvent>& out);
  // Forgets every block, as AllBlocksCleared does (no event).
  void Clear();
  // Every kvtier block the map holds, once per tier: what the index should hold
  // (in no particular order: Coordinator::PublishSnapshot stores parents
  // first).
  [[nodiscard]] std::vector<SnapshotBlock> Snapshot() const;

  size_t blocks() const { return entries_.size(); }
  const EngineMapStats& stats() const { return stats_; }
  const EngineKeySpace& space() const { return options_.space; }

 private:
  struct EntryKey {
    uint32_t group;
    EngineHash hash;
    friend bool operator==(const EntryKey&, const EntryKey&) = default;
  };
  struct EntryKeyHash {
    size_t operator()(const EntryKey& k) const { return EngineHashHasher{}(k.hash) ^ k.group; }
  };
  // Where a chain of kvtier blocks stands at the end of an engine block.
  struct Chain {
    BlockKey parent;                     // unsalted: the last complete kvtier block, or the root
    bool at_root = true;                 // no kvtier block complete yet
    BlockKey salted_parent = {};         // the tenant's salting of `parent`, unless at_root
    std::vector<uint32_t> pending = {};  // tokens after `parent`, fewer than tokens_per_block
    std::vector<std::string> pending_extra = {};
  };
  struct Entry {
    explicit Entry(std::pmr::memory_resource* memory) : keys(memory), key_tokens(memory) {}
    Chain chain;
    std::pmr::vector<BlockKey> keys;        // salted: the kvtier blocks this engine block completed
    std::pmr::vector<uint32_t> key_tokens;  // their tokens, for partial matching
    std::optional<BlockKey> first_parent = {};  // salted parent of keys[0]; nullopt: the root
    uint8_t tiers = 0;                          // bit per Tier
  };
  struct HeldKeyHash {
    size_t operator()(const std::pair<BlockKey, uint8_t>& k) const {
      return BlockKeyHash{}(k.first) ^ k.second;
    }
  };

  void Store(const EngineBlockStored& stored, std::vector<KvEvent>& out);
  void Remove(const EngineBlockRemoved& removed, std::vector<KvEvent>& out);
  // The chain a stored event starts from: its parent's, or a new root. nullopt:
  // unknown parent.
  std::optional<Chain> StartChain(const EngineBlockStored& stored,
                                  std::string_view cache_salt) const;
  // Extends `chain` by engine block `i` of `stored`, filling `entry` with the
  // kvtier blocks it completes.
  void Extend(const EngineBlockStored& stored, size_t i, std::span<const std::string> extras,
              Chain& chain, Entry& entry) const;
  std::vector<std::string> BlockExtras(const EngineBlockStored& stored, size_t i, bool chain_root,
                                       std::string* cache_salt) const;
  // Marks `entry` held in `tier`; appends a stored event for its keys not yet held there to `out`.
  void Hold(Entry& entry, Tier tier, std::vector<KvEvent>& out);

  Options options_;
  // The maps' nodes and buckets and the entries' vectors: a block's store and removal
  // reuse freed memory instead of calling malloc four times each. Kept up to the most
  // blocks held. Declared first: the maps and entries use it.
  std::pmr::unsynchronized_pool_resource memory_;
  std::pmr::unordered_map<EntryKey, Entry, EntryKeyHash> entries_{&memory_};
  // How many entries hold a salted key in a tier (groups of a hybrid model
  // share keys).
  std::pmr::unordered_map<std::pair<BlockKey, uint8_t>, uint32_t, HeldKeyHash> held_{&memory_};
  EngineMapStats stats_;
};

}  // namespace kvtier::coordinator
