#include "common/block_vocabulary.h"

#include <string>

namespace kvtier {

std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kGpu: return "gpu";
    case Tier::kHost: return "host";
    case Tier::kDisk: return "disk";
  }
  return "unknown";
}

namespace {

Status Validate(const RetentionConfig& config, uint32_t tokens_per_block, uint32_t prompt_tokens,
                uint32_t total_tokens) {
  if (tokens_per_block == 0) return InvalidArgumentError("tokens_per_block must be positive");
  if (prompt_tokens > total_tokens) {
    return InvalidArgumentError("prompt of " + std::to_string(prompt_tokens) +
                                " tokens is longer than the sequence (" +
                                std::to_string(total_tokens) + ")");
  }
  if (config.decode_priority > kMaxPriority) {
    return InvalidArgumentError("decode priority " + std::to_string(config.decode_priority) +
                                " is out of range [0, 100]");
  }
  for (size_t i = 0; i < config.ranges.size(); ++i) {
    const TokenRangeRetention& r = config.ranges[i];
    const std::string where = "retention range " + std::to_string(i);
    if (r.priority > kMaxPriority) {
      return InvalidArgumentError(where + ": priority " + std::to_string(r.priority) +
                                  " is out of range [0, 100]");
    }
    if (r.last_token && *r.last_token <= r.first_token) {
      return InvalidArgumentError(where + ": last_token " + std::to_string(*r.last_token) +
                                  " must be greater than first_token " +
                                  std::to_string(r.first_token));
    }
    if (r.duration && r.duration->count() <= 0)
      return InvalidArgumentError(where + ": duration must be positive");
  }
  return Status::Ok();
}

BlockRetention FromRange(uint8_t priority, const std::optional<Nanos>& duration) {
  return BlockRetention{priority, duration.value_or(Nanos(0))};
}

}  // namespace

Result<std::vector<BlockRetention>> ComputeBlockRetention(const RetentionConfig& config,
                                                          uint32_t tokens_per_block,
                                                          uint32_t prompt_tokens,
                                                          uint32_t total_tokens) {
  KVTIER_RETURN_IF_ERROR(Validate(config, tokens_per_block, prompt_tokens, total_tokens));
  const uint32_t blocks = total_tokens / tokens_per_block;
  std::vector<BlockRetention> out(blocks);
  for (uint32_t b = 0; b < blocks; ++b) {
    const uint64_t begin = uint64_t{b} * tokens_per_block;
    const uint64_t end = begin + tokens_per_block;
    if (end > prompt_tokens) {  // the block holds generated tokens
      out[b] = FromRange(config.decode_priority, config.decode_duration);
      continue;
    }
    for (const TokenRangeRetention& r : config.ranges) {
      const uint64_t last = r.last_token.value_or(prompt_tokens);
      if (r.first_token < end && begin < last) out[b] = FromRange(r.priority, r.duration);
    }
  }
  return out;
}

}  // namespace kvtier
