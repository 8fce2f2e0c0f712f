#include "services/worker/worker_plan.h"

#include <algorithm>
#include <optional>

#include "gpu/device.h"
#include "services/worker/pool/pool_sizing.h"

namespace kvtier::worker {

Result<WorkerPlan> PlanWorkerPool(const WorkerConfig& config, int gpu) {
  KVTIER_ASSIGN_OR_RETURN(KvLayout layout, WorkerLayout(config));
  uint64_t budget = config.pool_bytes;
  if (gpu >= 0) {
    KVTIER_ASSIGN_OR_RETURN(budget, gpu::FreeDeviceMemory(gpu));
  }
  Result<std::vector<PoolSize>> sizes =
      SizePools({.free_bytes = budget,
                 .free_memory_fraction = config.free_memory_fraction,
                 .max_tokens = config.max_tokens > 0 ? std::optional<uint64_t>(config.max_tokens)
                                                     : std::nullopt,
                 .pools = {{layout, 1.0}}});
  if (!sizes.ok()) {
    return Status(sizes.status().code(),
                  std::string(gpu >= 0 ? "GPU " + std::to_string(gpu) : "worker.pool_bytes") +
                      ": " + sizes.status().message());
  }
  const auto blocks =
      static_cast<uint32_t>(std::min<uint64_t>((*sizes)[0].num_blocks, UINT32_MAX - 1));
  return WorkerPlan{std::move(layout), blocks, gpu};
}

std::string WorkerPlan::Describe() const {
  return "worker pool " + layout.Fingerprint() + ", " + std::to_string(blocks) + " blocks of " +
         std::to_string(layout.bytes_per_block()) + " bytes in " +
         (gpu >= 0 ? "GPU " + std::to_string(gpu) + " memory (CUDA IPC)"
                   : std::string("host memory"));
}

}  // namespace kvtier::worker
