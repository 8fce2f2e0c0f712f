// BlockTokens: the tokens of indexed blocks, kept for partial matching (internal to
// services/coordinator/index).
//
// A prompt whose last block is not cached whole may still share its first tokens with a
// cached block after the matched prefix (the prompt ends inside a longer cached
// conversation, or diverges mid-block): an engine can copy those tokens' KV instead of
// computing them. Keys cannot say how many tokens two blocks share, so the index keeps
// the tokens of the blocks whose stored events carried them, grouped by parent, and
// compares the prompt's tail with each cached child of the matched prefix.
//
// Memory: the tokens (4 bytes each) plus about 120 bytes per block with tokens (an entry
// in each of two hash maps and a vector; BM_LookupPartial31 measures 239 bytes per indexed
// block with 16 tokens each, against 63 without). Blocks stored without tokens cost
// nothing here: kept apart from Block so that an index fed by nodes that send no tokens
// stays at its compact size. A flat arena with sibling links would halve the overhead.
//
// Thread safety: none (owned by one BlockIndex).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace kvtier::coordinator::internal {

class BlockTokens {
 public:
  // The group of a chain's first blocks under one salt scope; other blocks' group is
  // their parent block's index.
  static uint64_t RootGroup(uint16_t scope) { return uint64_t{1} << 32 | scope; }

  // Records the tokens of block `block`, a child in `group`. REQUIRES: none recorded yet.
  void Set(uint32_t block, uint64_t group, std::span<const uint32_t> tokens);
  // Forgets the block (it left the index); a block with no tokens is ignored.
  void Erase(uint32_t block);

  // Calls fn(block, tokens) for each block of `group` with tokens.
  template <typename Fn>
  void ForEachChild(uint64_t group, Fn&& fn) const {
    const auto it = children_.find(group);
    if (it == children_.end()) return;
    for (const uint32_t block : it->second) fn(block, std::span<const uint32_t>(tokens_.at(block).tokens));
  }

  size_t blocks() const { return tokens_.size(); }
  size_t memory_bytes() const { return memory_bytes_; }

 private:
  struct Entry {
    uint64_t group = 0;
    std::vector<uint32_t> tokens;
  };
  std::unordered_map<uint32_t, Entry> tokens_;
  std::unordered_map<uint64_t, std::vector<uint32_t>> children_;
  size_t memory_bytes_ = 0;
};

}  // namespace kvtier::coordinator::internal
