// Retention: a request's retention config turned into each block's priority and duration,
// with TensorRT-LLM's semantics (KvCacheRetentionConfig):
//   - token ranges [first_token, last_token) of the prompt get a priority (0-100) and an
//     optional duration; a block takes the priority of the ranges that overlap it, the
//     later range in the list winning where several do;
//   - a block holding any generated token takes the decode priority and duration;
//   - everything else gets the default priority 35, which never expires.
// Durations run from when the block is stored; then the priority reverts to 35 (the
// index's AdvanceTime does that).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/status.h"
#include "services/coordinator/index/block_index.h"

namespace kvtier::coordinator {

struct TokenRangeRetention {
  uint32_t first_token = 0;
  std::optional<uint32_t> last_token = std::nullopt;  // exclusive; nullopt: to the end of the prompt
  uint8_t priority = kDefaultPriority;
  std::optional<Nanos> duration = std::nullopt;       // nullopt: never expires
};

struct RetentionConfig {
  std::vector<TokenRangeRetention> ranges = {};
  uint8_t decode_priority = kDefaultPriority;
  std::optional<Nanos> decode_duration = std::nullopt;
};

// One entry per full block of a sequence of `total_tokens` tokens, the first
// `prompt_tokens` of which are the prompt. kInvalidArgument names the offending range.
[[nodiscard]] Result<std::vector<BlockRetention>> ComputeBlockRetention(const RetentionConfig& config,
                                                                        uint32_t tokens_per_block,
                                                                        uint32_t prompt_tokens, uint32_t total_tokens);

}  // namespace kvtier::coordinator
