// SinkWindowCache: the bookkeeping of a fixed-size cache of [sink tokens | local window],
// updated chunk by chunk, with ring indexing.
//
// The visible result is that of a cache that rolls its window left by copying (the
// BlockKVCache design): the first `sink_tokens` tokens of the sequence stay forever; the
// window holds the most recent `window_tokens` tokens; while the cache fills, tokens are
// written contiguously; a chunk index equal to the previous one rewrites the same tokens.
// Instead of moving bytes, the window is a ring: token t >= sink lives at position
// sink + (t - sink) mod window, and VisibleSlots() lists the slots in logical order
// (sinks first, then the window oldest to newest), which is what attention reads. A token
// that would be overwritten within its own chunk (a window shorter than a chunk) is not
// written at all, so a parallel kernel never writes one position twice.
//
// Positions map to pool slots through the cache's block table (position p -> slot
// block_table[p / tokens_per_block] * tokens_per_block + p % tokens_per_block), so the
// plans feed UpdatePaged directly and the cache's bytes live in pool blocks.
//
// Per step: BeginChunk(i) -> slots to write the chunk's tokens to (-1: skip); write them
// (UpdatePaged); attend over VisibleSlots(); EndChunk(i).
//
// Thread safety: none. No GPU needed: this is planning only.
//
// REQUIRES: (sink_tokens + window_tokens) % chunk_tokens == 0 (checked), window_tokens >= 1.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/status.h"

namespace kvtier {

struct SinkWindowOptions {
  uint32_t sink_tokens = 0;
  uint32_t window_tokens = 0;
  uint32_t chunk_tokens = 0;
  uint32_t tokens_per_block = 0;
  std::vector<uint32_t> block_table;  // ceil((sink + window) / tokens_per_block) pool blocks
};

class SinkWindowCache {
 public:
  [[nodiscard]] static Result<SinkWindowCache> Create(SinkWindowOptions options);

  // Starts chunk `chunk_index` (the previous index plus one, or the previous index again
  // to rewrite it) and returns one pool slot per token of the chunk, -1 for a token that
  // is not kept. kFailedPrecondition: a chunk is already open; kInvalidArgument: any
  // other index (the error names the ones allowed). Nothing changes on error.
  [[nodiscard]] Result<std::vector<int64_t>> BeginChunk(int64_t chunk_index);

  // Pool slots attention reads during the open chunk (or after the last one), in logical
  // order: the sink tokens, then the window from oldest to newest.
  [[nodiscard]] std::vector<int64_t> VisibleSlots() const;
  // VisibleSlots as a block table in logical order, where every block's slots are whole
  // and in order (sink_tokens, window_tokens and chunk_tokens multiples of
  // tokens_per_block): a chunk's attention reads it as a sequence of VisibleSlots().size()
  // tokens whose last chunk_tokens are the chunk (ChunkedAttention's causal mask is then
  // the ring's). kFailedPrecondition otherwise, naming the first block that is not whole.
  [[nodiscard]] Result<std::vector<uint32_t>> VisibleBlockTable() const;

  // Closes the open chunk. kFailedPrecondition when `chunk_index` is not the open chunk.
  [[nodiscard]] Status EndChunk(int64_t chunk_index);

  void Reset();

  uint32_t capacity_tokens() const { return options_.sink_tokens + options_.window_tokens; }
  // Tokens of the sequence so far, counting an open chunk.
  int64_t sequence_tokens() const;
  bool steady_state() const { return sequence_tokens() > capacity_tokens(); }

 private:
  explicit SinkWindowCache(SinkWindowOptions options) : options_(std::move(options)) {}
  int64_t PositionOf(int64_t token) const;
  int64_t SlotOf(int64_t position) const;

  SinkWindowOptions options_;
  int64_t last_chunk_ = -1;  // last closed chunk; -1 when empty
  std::optional<int64_t> open_chunk_;
};

}  // namespace kvtier
