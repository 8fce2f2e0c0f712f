#include "services/worker/pool/pool_sizing.h"

#include <cmath>
#include <string>

namespace kvtier::worker {
namespace {

std::string PoolName(size_t i, const KvLayout& layout) {
  return "pool " + std::to_string(i) + " (window " +
         (layout.windowed() ? std::to_string(layout.attention_window()) + " tokens"
                            : std::string("full")) +
         ", " + std::to_string(layout.num_kv_heads()) + " KV heads)";
}

Status Validate(const PoolSizingOptions& o) {
  if (!(o.free_memory_fraction > 0.0 && o.free_memory_fraction <= 1.0)) {
    return InvalidArgumentError("free_memory_fraction " + std::to_string(o.free_memory_fraction) +
                                " is out of range (0, 1]");
  }
  if (o.pools.empty()) return InvalidArgumentError("no pools configured");
  if (o.max_tokens.has_value() && *o.max_tokens == 0)
    return InvalidArgumentError("max_tokens must be at least 1");
  double shares = 0.0;
  for (size_t i = 0; i < o.pools.size(); ++i) {
    const PoolSpec& p = o.pools[i];
    if (!(p.fraction > 0.0 && p.fraction <= 1.0)) {
      return InvalidArgumentError(PoolName(i, p.layout) + ": fraction " +
                                  std::to_string(p.fraction) + " is out of range (0, 1]");
    }
    shares += p.fraction;
    for (size_t j = 0; j < i; ++j) {
      const KvLayout& other = o.pools[j].layout;
      if (other.attention_window() == p.layout.attention_window() &&
          other.num_kv_heads() == p.layout.num_kv_heads()) {
        return InvalidArgumentError(PoolName(i, p.layout) + " repeats pool " + std::to_string(j) +
                                    ": one pool per (attention window, KV heads)");
      }
    }
  }
  if (shares > 1.0 + 1e-9) {
    return InvalidArgumentError("the pools' fractions sum to " + std::to_string(shares) +
                                ", above 1");
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<PoolSize>> SizePools(const PoolSizingOptions& o) {
  KVTIER_RETURN_IF_ERROR(Validate(o));
  const double kv_bytes = static_cast<double>(o.free_bytes) * o.free_memory_fraction;
  std::vector<PoolSize> sizes;
  for (size_t i = 0; i < o.pools.size(); ++i) {
    const KvLayout& layout = o.pools[i].layout;
    PoolSize size;
    size.budget_bytes = static_cast<uint64_t>(std::floor(kv_bytes * o.pools[i].fraction));
    uint64_t blocks = size.budget_bytes / layout.bytes_per_block();
    if (blocks == 0) {
      return ResourceExhaustedError(
          PoolName(i, layout) + ": its budget of " + std::to_string(size.budget_bytes) +
          " bytes is below one block of " + std::to_string(layout.bytes_per_block()) +
          " bytes (raise free_memory_fraction or the pool's fraction)");
    }
    if (o.max_tokens.has_value()) {
      const uint64_t token_blocks =
          (*o.max_tokens + layout.tokens_per_block() - 1) / layout.tokens_per_block();
      if (token_blocks < blocks) {
        blocks = token_blocks;
        size.capped_by_max_tokens = true;
      }
    }
    // Block ids are 32-bit with one value reserved.
    size.num_blocks = static_cast<uint32_t>(std::min<uint64_t>(blocks, UINT32_MAX - 1));
    size.bytes = uint64_t{size.num_blocks} * layout.bytes_per_block();
    sizes.push_back(size);
  }
  return sizes;
}

}  // namespace kvtier::worker
