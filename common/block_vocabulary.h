// The words every part of kvtier shares about a cached block: the tier that holds it, its
// priority and how long that priority lasts (retention), and the role of the node that
// holds it. The index, the pools, the tiers, the wire and the SDK all speak them, so they
// live here, below all of them.
//
// Retention follows TensorRT-LLM's KvCacheRetentionConfig:
//   - token ranges [first_token, last_token) of the prompt get a priority (0-100) and an
//     optional duration; a block takes the priority of the ranges that overlap it, the
//     later range in the list winning where several do;
//   - a block holding any generated token takes the decode priority and duration;
//   - everything else gets kDefaultPriority, which never expires.
// Durations run from when the block is stored; then the priority reverts to the default.
//
// Thread safety: values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace kvtier {

// Where a block is held: a GPU pool (or a host-memory pool standing in for one), a
// node's host RAM tier, its disk tier. The values are the wire's and the metrics' order.
enum class Tier : uint8_t { kGpu = 0, kHost = 1, kDisk = 2 };
inline constexpr int kTierCount = 3;
// "gpu", "host", "disk" (metric labels, JSON); "unknown" for any other value.
[[nodiscard]] std::string_view TierName(Tier tier);

// Eviction priority of a block, 0 (first to go) to kMaxPriority; a block stored without
// one has kDefaultPriority, which is also the pools' offload threshold.
inline constexpr uint8_t kDefaultPriority = 35;
inline constexpr uint8_t kMaxPriority = 100;

// Priority and retention of one stored block. duration 0: the priority never expires.
struct BlockRetention {
  uint8_t priority = kDefaultPriority;
  Nanos duration{0};
};

struct TokenRangeRetention {
  uint32_t first_token = 0;
  std::optional<uint32_t> last_token =
      std::nullopt;  // exclusive; nullopt: to the end of the prompt
  uint8_t priority = kDefaultPriority;
  std::optional<Nanos> duration = std::nullopt;  // nullopt: never expires
};

struct RetentionConfig {
  std::vector<TokenRangeRetention> ranges = {};
  uint8_t decode_priority = kDefaultPriority;
  std::optional<Nanos> decode_duration = std::nullopt;
};

// One entry per full block of a sequence of `total_tokens` tokens, the first
// `prompt_tokens` of which are the prompt. kInvalidArgument names the offending range.
[[nodiscard]] Result<std::vector<BlockRetention>> ComputeBlockRetention(
    const RetentionConfig& config, uint32_t tokens_per_block, uint32_t prompt_tokens,
    uint32_t total_tokens);

// What a node of the cluster is. kEngine: an inference engine's prefix cache, learned from
// its own KV event stream (services/coordinator/engines/), routed to like a worker.
enum class NodeRole : uint8_t { kWorker, kStore, kEngine };

}  // namespace kvtier
