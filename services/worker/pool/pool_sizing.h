// Pool sizing: how many blocks each of a worker's pools gets.
//
// A worker has one pool per (attention window, KV-head count) of its model, each with its
// own block layout (common/kv_layout.h). The memory for KV blocks is
// free_memory_fraction of the free device memory (or of the configured host budget when
// there is no GPU), divided among the pools by their configured fractions. max_tokens,
// when set, caps every pool at the blocks that many tokens need; where both limits are
// set the smaller wins, per pool. A pool never gets more blocks than its budget holds.
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/kv_layout.h"
#include "common/status.h"

namespace kvtier::worker {

struct PoolSpec {
  KvLayout layout;
  double fraction = 1.0;  // share of the KV memory; the pools' shares sum to at most 1
};

struct PoolSizingOptions {
  uint64_t free_bytes = 0;                            // free device memory, or the host budget
  double free_memory_fraction = 0.9;                  // in (0, 1]
  std::optional<uint64_t> max_tokens = std::nullopt;  // tokens the cache must hold at most
  std::vector<PoolSpec> pools = {};
};

struct PoolSize {
  uint64_t budget_bytes = 0;  // what the fractions give this pool
  uint32_t num_blocks = 0;
  uint64_t bytes = 0;  // num_blocks * bytes per block: what is allocated
  bool capped_by_max_tokens = false;
};

// kInvalidArgument: a fraction out of range, shares above 1, two pools for the same
// (window, KV heads); kResourceExhausted: a pool whose budget is below one block (the
// message names the pool, its budget and its block size).
[[nodiscard]] Result<std::vector<PoolSize>> SizePools(const PoolSizingOptions& options);

}  // namespace kvtier::worker
