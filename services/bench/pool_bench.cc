#include "services/bench/pool_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gpu/kernels.h"
#include "services/worker/pool/block_pool.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

Status RunAllocFree(const PoolBenchOptions& o, PoolBenchResult& result) {
  KVTIER_ASSIGN_OR_RETURN(auto pool, worker::BlockPool::Create({.num_blocks = o.pool_blocks, .tokens_per_block = 16}));
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> size(o.min_alloc, std::min(o.max_alloc, o.pool_blocks));
  std::vector<worker::BlockId> blocks;
  std::vector<worker::EvictedBlock> evicted;
  blocks.reserve(o.max_alloc);
  uint64_t total = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  while (elapsed < o.alloc_seconds) {
    for (int i = 0; i < 64; ++i) {  // check the clock every 64 rounds
      blocks.clear();
      KVTIER_RETURN_IF_ERROR(pool->AllocateBlocks(size(rng), &blocks, &evicted));
      KVTIER_RETURN_IF_ERROR(pool->FreeBlocks(blocks));
      total += blocks.size();
    }
    elapsed = Seconds(start);
  }
  result.alloc_free_blocks = total;
  result.alloc_free_per_sec = static_cast<double>(total) / elapsed;
  return Status::Ok();
}

template <typename Fn>
Result<double> TimedGbps(uint32_t repeats, uint64_t bytes, Fn&& fn) {
  KVTIER_RETURN_IF_ERROR(fn());  // warm-up: pages touched, kernels loaded
  std::vector<double> seconds;
  for (uint32_t r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    KVTIER_RETURN_IF_ERROR(fn());
    seconds.push_back(Seconds(start));
  }
  return static_cast<double>(bytes) / Median(seconds) / 1e9;
}

Status RunCopies(const PoolBenchOptions& o, PoolBenchResult& result) {
  std::unique_ptr<gpu::KernelBackend> backend;
  if (o.allow_gpu) {
    if (auto cuda = gpu::MakeCudaBackend(0); cuda.ok()) backend = std::move(cuda).value();
  }
  if (!backend) backend = gpu::MakeCpuBackend();
  result.backend = std::string(backend->name());
  const uint64_t batch_bytes = o.block_bytes * o.batch_blocks;
  KVTIER_ASSIGN_OR_RETURN(auto pool, gpu::DeviceBuffer::Create(*backend, gpu::MemoryKind::kDevice, o.block_bytes * o.copy_pool_blocks));
  KVTIER_ASSIGN_OR_RETURN(auto staging, gpu::DeviceBuffer::Create(*backend, gpu::MemoryKind::kStaging, batch_bytes));
  std::memset(staging.data(), 1, batch_bytes);
  // Distinct random blocks, so the batch is scattered through the pool.
  std::vector<uint32_t> ids(o.copy_pool_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(11));
  ids.resize(o.batch_blocks);
  KVTIER_ASSIGN_OR_RETURN(auto device_ids, gpu::DeviceBuffer::Create(*backend, gpu::MemoryKind::kDevice, ids.size() * 4));
  KVTIER_RETURN_IF_ERROR(backend->CopyIn(device_ids.data(), ids.data(), ids.size() * 4));
  const gpu::BlockCopyArgs args{pool.data(), o.copy_pool_blocks, o.block_bytes, device_ids.as<uint32_t>(), o.batch_blocks,
                                staging.data()};
  KVTIER_RETURN_IF_ERROR(backend->Scatter(args));  // every pool page touched once
  KVTIER_ASSIGN_OR_RETURN(result.gather_gbps, TimedGbps(o.repeats, batch_bytes, [&] { return backend->Gather(args); }));
  KVTIER_ASSIGN_OR_RETURN(result.scatter_gbps, TimedGbps(o.repeats, batch_bytes, [&] { return backend->Scatter(args); }));
  KVTIER_ASSIGN_OR_RETURN(result.memcpy_gbps, TimedGbps(o.repeats, batch_bytes, [&] {
                            return backend->CopyOut(staging.data(), pool.data(), batch_bytes);
                          }));
  return Status::Ok();
}

}  // namespace

Result<PoolBenchResult> RunPoolBench(const PoolBenchOptions& o) {
  if (o.min_alloc == 0 || o.min_alloc > o.max_alloc) {
    return InvalidArgumentError("pool bench: need 1 <= min_alloc <= max_alloc");
  }
  if (o.batch_blocks == 0 || o.batch_blocks > o.copy_pool_blocks) {
    return InvalidArgumentError("pool bench: need 1 <= batch_blocks <= copy_pool_blocks");
  }
  if (o.block_bytes == 0 || o.block_bytes % 16 != 0) {
    return InvalidArgumentError("pool bench: block_bytes must be a positive multiple of 16");
  }
  PoolBenchResult result;
  KVTIER_RETURN_IF_ERROR(RunAllocFree(o, result));
  KVTIER_RETURN_IF_ERROR(RunCopies(o, result));
  return result;
}

}  // namespace kvtier::bench
