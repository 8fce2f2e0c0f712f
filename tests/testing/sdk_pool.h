// For tests that play an inference engine through the SDK: the engine's worker pool,
// attached with the worker's own layout and mapped into the test's process.
#pragma once

#include "services/client/client.h"

namespace kvtier::testing {

inline Result<client::MappedPool> MapWorkerPool(client::Client& engine, uint32_t pool_id = 0) {
  Result<client::WorkerStats> stats = engine.GetWorkerStats();
  if (!stats.ok()) return stats.status();
  Result<client::PoolMapping> attached =
      engine.AttachPool(pool_id, stats->pool_layouts.at(pool_id));
  if (!attached.ok()) return attached.status();
  return client::MappedPool::Map(*attached);
}

}  // namespace kvtier::testing
