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
// Layout: one arena of uint32 records, [token count, previous sibling, next sibling,
// tokens...], so a block's tokens and its links to the other children of its parent
// (those with tokens) sit together; freed records are reused by the next of the same
// size. Two tables indexed by block id give a block's record and its first child with
// tokens; their pages of 1024 entries exist only where some block has tokens, so an index
// fed by nodes that send no tokens pays nothing here (Block itself has no room to spare:
// the 64-byte goal). Per block with tokens: 4 bytes per token plus 20 (three record
// words and the two table entries), and the arena's unused capacity. Freed records stay
// in the arena for reuse until the last block with tokens leaves, which frees it all.
//
// Thread safety: none (owned by one BlockIndex).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvtier::coordinator::internal {

class BlockTokens {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  // The group of a chain's first blocks under one salt scope; other blocks' group is
  // their parent block's index.
  static uint64_t RootGroup(uint16_t scope) { return uint64_t{1} << 32 | scope; }

  // Records the tokens of block `block`, a child in `group`.
  // REQUIRES: none recorded for `block`; block < kNone.
  void Set(uint32_t block, uint64_t group, std::span<const uint32_t> tokens);
  // Forgets the block's tokens (it left the index); a block with none is ignored.
  // REQUIRES: `group` is the one its tokens were recorded under, and no child of the
  // block has tokens recorded (a block leaves the index after its children).
  void Erase(uint32_t block, uint64_t group);

  // Calls fn(block, tokens) for each block of `group` with tokens, the latest first.
  // REQUIRES: fn does not call Set or Erase.
  template <typename Fn>
  void ForEachChild(uint64_t group, Fn&& fn) const {
    for (uint32_t block = Head(group); block != kNone;) {
      const uint32_t* record = arena_.data() + record_of_.Get(block);
      fn(block, std::span<const uint32_t>(record + kHeaderWords, record[kCount]));
      block = record[kNext];
    }
  }

  bool Has(uint32_t block) const { return record_of_.Get(block) != kNone; }
  size_t blocks() const { return blocks_; }
  size_t memory_bytes() const;

 private:
  // A block-indexed table of uint32 (default kNone) whose pages exist only once written.
  class SparseTable {
   public:
    uint32_t Get(uint32_t i) const {
      const size_t page = i >> kPageBits;
      return page < pages_.size() && pages_[page] ? pages_[page][i & kPageMask] : kNone;
    }
    void Set(uint32_t i, uint32_t value);
    size_t memory_bytes() const;

   private:
    static constexpr uint32_t kPageBits = 10;
    static constexpr uint32_t kPageMask = (1u << kPageBits) - 1;
    std::vector<std::unique_ptr<uint32_t[]>> pages_;
    size_t allocated_pages_ = 0;
  };

  static constexpr uint32_t kCount = 0, kPrev = 1, kNext = 2, kHeaderWords = 3;

  uint32_t Head(uint64_t group) const;
  void SetHead(uint64_t group, uint32_t block);
  uint32_t Allocate(uint32_t words);
  void Release(uint32_t offset, uint32_t words);

  std::vector<uint32_t> arena_;
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> free_;  // record words -> free offsets
  SparseTable record_of_;                              // block -> its record's offset in arena_
  SparseTable first_child_;                            // block -> its latest child with tokens
  std::unordered_map<uint16_t, uint32_t> root_heads_;  // scope -> latest first block with tokens
  size_t blocks_ = 0;
};

}  // namespace kvtier::coordinator::internal
