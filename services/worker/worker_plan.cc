#include "services/worker/worker_plan.h"

#include <algorithm>
#include <optional>

#include "gpu/device.h"
#include "services/worker/pool/pool_sizing.h"

namespace kvtier::worker {
namespace {

// Each pool's share of the KV memory: its bytes per token times its window, of the sum.
std::vector<PoolSpec> Shares(const std::vector<WorkerPoolLayout>& pools) {
  if (pools.size() == 1) return {{pools[0].layout, 1.0}};
  double total = 0;
  std::vector<double> weights;
  for (const WorkerPoolLayout& p : pools) {
    const double per_token = static_cast<double>(p.layout.bytes_per_block()) /
                             static_cast<double>(p.layout.tokens_per_block());
    weights.push_back(per_token * static_cast<double>(p.layout.attention_window()));
    total += weights.back();
  }
  std::vector<PoolSpec> specs;
  for (size_t i = 0; i < pools.size(); ++i) specs.push_back({pools[i].layout, weights[i] / total});
  return specs;
}

std::string Layers(const std::vector<uint32_t>& layers) {
  std::string out;
  for (uint32_t l : layers) out += (out.empty() ? "" : ", ") + std::to_string(l);
  return out;
}

}  // namespace

Result<WorkerPlan> PlanWorkerPool(const WorkerConfig& config, int gpu) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<WorkerPoolLayout> layouts, WorkerLayouts(config));
  uint64_t budget = config.pool_bytes;
  if (gpu >= 0) {
    KVTIER_ASSIGN_OR_RETURN(budget, gpu::FreeDeviceMemory(gpu));
  }
  std::vector<PoolSpec> specs = Shares(layouts);
  Result<std::vector<PoolSize>> sizes =
      SizePools({.free_bytes = budget,
                 .free_memory_fraction = config.free_memory_fraction,
                 .max_tokens = config.max_tokens > 0 ? std::optional<uint64_t>(config.max_tokens)
                                                     : std::nullopt,
                 .pools = std::move(specs)});
  if (!sizes.ok()) {
    return Status(sizes.status().code(),
                  std::string(gpu >= 0 ? "GPU " + std::to_string(gpu) : "worker.pool_bytes") +
                      ": " + sizes.status().message());
  }
  WorkerPlan plan;
  plan.gpu = gpu;
  for (size_t i = 0; i < layouts.size(); ++i) {
    plan.pools.push_back(
        {std::move(layouts[i].layout),
         static_cast<uint32_t>(std::min<uint64_t>((*sizes)[i].num_blocks, UINT32_MAX - 1)),
         std::move(layouts[i].layers)});
  }
  return plan;
}

uint64_t WorkerPlan::max_block_bytes() const {
  uint64_t bytes = 0;
  for (const PlannedPool& p : pools) bytes = std::max<uint64_t>(bytes, p.layout.bytes_per_block());
  return bytes;
}

std::string WorkerPlan::Describe() const {
  const std::string where = gpu >= 0 ? "GPU " + std::to_string(gpu) + " memory (CUDA IPC)"
                                     : std::string("host memory");
  const auto blocks = [](const PlannedPool& p) {
    return std::to_string(p.blocks) + " blocks of " + std::to_string(p.layout.bytes_per_block()) +
           " bytes";
  };
  if (pools.size() == 1)
    return "worker pool " + pools[0].layout.Fingerprint() + ", " + blocks(pools[0]) + " in " + where;
  std::string out = "worker pools";
  for (size_t i = 0; i < pools.size(); ++i) {
    out += (i == 0 ? " " : "; ") + std::to_string(i) + ": " + pools[i].layout.Fingerprint() +
           " (layers " + Layers(pools[i].layers) + "), " + blocks(pools[i]);
  }
  return out + "; in " + where;
}

}  // namespace kvtier::worker
