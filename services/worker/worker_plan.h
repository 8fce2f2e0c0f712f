// The pool a worker node gets from its configuration: the KV layout of worker.*, and how
// many blocks fit in free_memory_fraction of the GPU's free memory (or of pool_bytes
// without a GPU), capped by max_tokens (services/worker/pool/pool_sizing.h). What
// `kvtier up`'s embedded worker and `kvtier worker` both size their pool with.
//
// Thread safety: a function; it asks the device for its free memory.
#pragma once

#include <cstdint>
#include <string>

#include "common/config.h"
#include "common/kv_layout.h"
#include "common/status.h"

namespace kvtier::worker {

struct WorkerPlan {
  KvLayout layout;
  uint32_t blocks = 0;
  int gpu = -1;  // the device whose memory holds the pool; -1: host shared memory
  // "worker pool L4/H2/..., 7372 blocks of 32768 bytes in host memory"
  std::string Describe() const;
};

// kInvalidArgument for a layout the library refuses; the sizing's errors name the budget
// (the GPU, or worker.pool_bytes).
[[nodiscard]] Result<WorkerPlan> PlanWorkerPool(const WorkerConfig& config, int gpu);

}  // namespace kvtier::worker
