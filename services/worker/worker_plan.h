// The pools a worker node gets from its configuration: one per distinct attention window of
// worker.* (common/config.h's WorkerLayouts), and how many blocks each gets of
// free_memory_fraction of the GPU's free memory (or of pool_bytes without a GPU), capped by
// max_tokens (services/worker/pool/pool_sizing.h). The memory is split among windows as
// TensorRT-LLM's BlockManager::calculateWindowSizeToShare splits it
// (cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp, NVIDIA/TensorRT-LLM at b35ac1b6):
// each pool's share is its bytes per token (its layers) times its window, of the sum over
// pools; full attention alone takes it all. What `kvtier up`'s embedded worker and
// `kvtier worker` both size their pools with.
//
// Thread safety: a function; it asks the device for its free memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/kv_layout.h"
#include "common/status.h"

namespace kvtier::worker {

struct PlannedPool {
  KvLayout layout;
  uint32_t blocks = 0;
  std::vector<uint32_t> layers;  // the model's layers this pool holds, in order
};

struct WorkerPlan {
  std::vector<PlannedPool> pools;  // by pool id
  int gpu = -1;  // the device whose memory holds the pools; -1: host shared memory

  // The largest block of any pool (the tiers' page size).
  uint64_t max_block_bytes() const;
  // "worker pool L4/H2/..., 7372 blocks of 32768 bytes in host memory"; with several pools
  // "worker pools 0: .../W1024/S4 (layers 0, 2), 900 blocks of ...; 1: ...; in host memory"
  std::string Describe() const;
};

// kInvalidArgument for a layout the library refuses; the sizing's errors name the budget
// (the GPU, or worker.pool_bytes).
[[nodiscard]] Result<WorkerPlan> PlanWorkerPool(const WorkerConfig& config, int gpu);

}  // namespace kvtier::worker
