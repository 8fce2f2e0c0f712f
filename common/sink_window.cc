#include "common/sink_window.h"

#include <algorithm>
#include <string>

namespace kvtier {

Result<SinkWindowCache> SinkWindowCache::Create(SinkWindowOptions o) {
  if (o.window_tokens == 0)
    return InvalidArgumentError("sink window cache: window_tokens must be at least 1");
  if (o.chunk_tokens == 0)
    return InvalidArgumentError("sink window cache: chunk_tokens must be at least 1");
  const uint32_t total = o.sink_tokens + o.window_tokens;
  if (total % o.chunk_tokens != 0) {
    return InvalidArgumentError("sink window cache: sink_tokens + window_tokens (" +
                                std::to_string(total) + ") must be a multiple of chunk_tokens (" +
                                std::to_string(o.chunk_tokens) + ")");
  }
  if (o.tokens_per_block == 0)
    return InvalidArgumentError("sink window cache: tokens_per_block must be at least 1");
  const size_t blocks = (total + o.tokens_per_block - 1) / o.tokens_per_block;
  if (o.block_table.size() != blocks) {
    return InvalidArgumentError("sink window cache: " + std::to_string(total) +
                                " tokens in blocks of " + std::to_string(o.tokens_per_block) +
                                " need a block table of " + std::to_string(blocks) +
                                " blocks, not " + std::to_string(o.block_table.size()));
  }
  return SinkWindowCache(std::move(o));
}

int64_t SinkWindowCache::sequence_tokens() const {
  const int64_t chunks =
      open_chunk_.has_value() ? std::max(*open_chunk_, last_chunk_) + 1 : last_chunk_ + 1;
  return chunks * options_.chunk_tokens;
}

int64_t SinkWindowCache::PositionOf(int64_t token) const {
  if (token < options_.sink_tokens) return token;
  return options_.sink_tokens + (token - options_.sink_tokens) % options_.window_tokens;
}

int64_t SinkWindowCache::SlotOf(int64_t position) const {
  const int64_t tpb = options_.tokens_per_block;
  return int64_t{options_.block_table[static_cast<size_t>(position / tpb)]} * tpb + position % tpb;
}

Result<std::vector<int64_t>> SinkWindowCache::BeginChunk(int64_t chunk_index) {
  if (open_chunk_.has_value()) {
    return FailedPreconditionError("sink window cache: chunk " + std::to_string(*open_chunk_) +
                                   " is still open; call EndChunk first");
  }
  if (chunk_index != last_chunk_ + 1 && (chunk_index != last_chunk_ || last_chunk_ < 0)) {
    return InvalidArgumentError(
        "sink window cache: chunk index " + std::to_string(chunk_index) + " must be " +
        std::to_string(last_chunk_ + 1) +
        (last_chunk_ >= 0 ? " (the next) or " + std::to_string(last_chunk_) + " (a rewrite)" : ""));
  }
  open_chunk_ = chunk_index;
  const int64_t first = chunk_index * options_.chunk_tokens;
  const int64_t end = first + options_.chunk_tokens;
  std::vector<int64_t> slots(options_.chunk_tokens, -1);
  for (int64_t t = first; t < end; ++t) {
    // Sink tokens always; window tokens only if still in the window at the chunk's end.
    if (t < options_.sink_tokens || t >= end - options_.window_tokens)
      slots[t - first] = SlotOf(PositionOf(t));
  }
  return slots;
}

std::vector<int64_t> SinkWindowCache::VisibleSlots() const {
  const int64_t end = sequence_tokens();
  const int64_t sinks = std::min<int64_t>(end, options_.sink_tokens);
  std::vector<int64_t> slots;
  for (int64_t t = 0; t < sinks; ++t) slots.push_back(SlotOf(t));
  for (int64_t t = std::max<int64_t>(sinks, end - options_.window_tokens); t < end; ++t)
    slots.push_back(SlotOf(PositionOf(t)));
  return slots;
}

Result<std::vector<uint32_t>> SinkWindowCache::VisibleBlockTable() const {
  const std::vector<int64_t> slots = VisibleSlots();
  const int64_t tpb = options_.tokens_per_block;
  std::vector<uint32_t> table;
  table.reserve((slots.size() + tpb - 1) / tpb);
  for (size_t k = 0; k < slots.size(); ++k) {
    const bool starts_block = k % tpb == 0;
    if (starts_block ? slots[k] % tpb != 0 : slots[k] != slots[k - 1] + 1) {
      return FailedPreconditionError(
          "sink window cache: visible block " + std::to_string(k / tpb) +
          " is not one whole pool block in order (sink_tokens, window_tokens and chunk_tokens "
          "must be multiples of tokens_per_block " +
          std::to_string(tpb) + "); read VisibleSlots instead");
    }
    if (starts_block) table.push_back(static_cast<uint32_t>(slots[k] / tpb));
  }
  return table;
}

Status SinkWindowCache::EndChunk(int64_t chunk_index) {
  if (!open_chunk_.has_value() || *open_chunk_ != chunk_index) {
    return FailedPreconditionError("sink window cache: chunk " + std::to_string(chunk_index) +
                                   " is not open");
  }
  last_chunk_ = std::max(last_chunk_, chunk_index);
  open_chunk_.reset();
  return Status::Ok();
}

void SinkWindowCache::Reset() {
  last_chunk_ = -1;
  open_chunk_.reset();
}

}  // namespace kvtier
