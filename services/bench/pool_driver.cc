#include "services/bench/pool_driver.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "gpu/kernels.h"
#include "services/worker/pool/block_pool.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

Status RunAllocFree(const PoolBenchOptions& o, PoolBenchResult& result) {
  KVTIER_ASSIGN_OR_RETURN(
      auto pool, worker::BlockPool::Create({.num_blocks = o.pool_blocks, .tokens_per_block = 16}));
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

using TimedOp = std::function<Status()>;

// Times operations side by side: each round calls every one of `ops` once, in turn, and
// each figure is the median of its `repeats` rounds. An operation and its plain-copy
// reference thus see the same clocks: timed one after the other, a GPU whose clocks
// drifted between them gave ratios from 0.7 to 2 for the same 32 MiB calls on an H100.
// Warm-up: pages touched, kernels loaded, and 50 ms of rounds, so that a GPU's clocks
// have left whatever state the previous phase left them in.
Result<std::vector<double>> TimedGbpsSideBySide(uint32_t repeats, uint64_t bytes,
                                                const std::vector<TimedOp>& ops) {
  const auto warm_start = Clock::now();
  do {
    for (const TimedOp& op : ops) KVTIER_RETURN_IF_ERROR(op());
  } while (Seconds(warm_start) < 0.05);
  std::vector<std::vector<double>> seconds(ops.size());
  for (uint32_t r = 0; r < repeats; ++r) {
    for (size_t k = 0; k < ops.size(); ++k) {
      const auto start = Clock::now();
      KVTIER_RETURN_IF_ERROR(ops[k]());
      seconds[k].push_back(Seconds(start));
    }
  }
  std::vector<double> gbps;
  gbps.reserve(seconds.size());
  for (const auto& s : seconds) gbps.push_back(static_cast<double>(bytes) / Median(s) / 1e9);
  return gbps;
}

std::unique_ptr<gpu::KernelBackend> PickBackend(bool allow_gpu) {
  if (allow_gpu) {
    if (auto cuda = gpu::MakeCudaBackend(0); cuda.ok()) return std::move(cuda).value();
  }
  return gpu::MakeCpuBackend();
}

// Gather and scatter between the pool and staging in the pool's memory (device to device
// on a GPU), and against pinned host staging (offload, onboard), each beside a plain copy
// of the same bytes in the same direction.
Status RunBlockCopies(gpu::KernelBackend& backend, const PoolBenchOptions& o,
                      PoolBenchResult& result) {
  using gpu::DeviceBuffer;
  using gpu::MemoryKind;
  const uint64_t batch_bytes = o.block_bytes * o.batch_blocks;
  KVTIER_ASSIGN_OR_RETURN(auto pool, DeviceBuffer::Create(backend, MemoryKind::kDevice,
                                                          o.block_bytes * o.copy_pool_blocks));
  KVTIER_ASSIGN_OR_RETURN(auto near,
                          DeviceBuffer::Create(backend, MemoryKind::kDevice, batch_bytes));
  KVTIER_ASSIGN_OR_RETURN(auto pinned,
                          DeviceBuffer::Create(backend, MemoryKind::kStaging, batch_bytes));
  std::memset(pinned.data(), 1, batch_bytes);
  // Distinct random blocks, so the batch is scattered through the pool.
  std::vector<uint32_t> ids(o.copy_pool_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(11));
  ids.resize(o.batch_blocks);
  KVTIER_ASSIGN_OR_RETURN(auto device_ids,
                          DeviceBuffer::Create(backend, MemoryKind::kDevice, ids.size() * 4));
  KVTIER_RETURN_IF_ERROR(backend.Copy(device_ids.data(), ids.data(), ids.size() * 4));
  gpu::BlockCopyArgs args{pool.data(),    o.copy_pool_blocks,
                          o.block_bytes,  device_ids.as<uint32_t>(),
                          o.batch_blocks, near.data()};
  for (uint32_t i = 0; i < o.copy_pool_blocks; i += o.batch_blocks) {  // touch every pool page once
    KVTIER_RETURN_IF_ERROR(backend.Copy(
        static_cast<char*>(pool.data()) + uint64_t{i} * o.block_bytes, pinned.data(),
        std::min<uint64_t>(batch_bytes, uint64_t{o.copy_pool_blocks - i} * o.block_bytes)));
  }
  KVTIER_ASSIGN_OR_RETURN(
      const std::vector<double> near_gbps,
      TimedGbpsSideBySide(
          o.repeats, batch_bytes,
          {[&] { return backend.Gather(args); }, [&] { return backend.Scatter(args); },
           [&] { return backend.Copy(near.data(), pool.data(), batch_bytes); }}));
  result.gather_gbps = near_gbps[0];
  result.scatter_gbps = near_gbps[1];
  result.memcpy_gbps = near_gbps[2];
  gpu::BlockCopyArgs pinned_args = args;
  pinned_args.staging = pinned.data();
  KVTIER_ASSIGN_OR_RETURN(
      const std::vector<double> pinned_gbps,
      TimedGbpsSideBySide(o.repeats, batch_bytes,
                          {[&] { return backend.Gather(pinned_args); },
                           [&] { return backend.Scatter(pinned_args); },
                           [&] { return backend.Copy(pinned.data(), pool.data(), batch_bytes); },
                           [&] { return backend.Copy(pool.data(), pinned.data(), batch_bytes); }}));
  result.offload_gbps = pinned_gbps[0];
  result.onboard_gbps = pinned_gbps[1];
  result.pinned_d2h_gbps = pinned_gbps[2];
  result.pinned_h2d_gbps = pinned_gbps[3];
  return Status::Ok();
}

// The linear KV update (bf16, 8 KV heads of 128, update_batch sequences appending
// update_tokens tokens each into an update_max_seq-token cache) against a plain copy of
// the bytes it moves.
constexpr uint32_t kUpdateHeads = 8, kUpdateHeadSize = 128;

struct UpdateBuffers {
  gpu::DeviceBuffer cache, update, indices;
};

Result<UpdateBuffers> AllocateUpdate(gpu::KernelBackend& backend, const PoolBenchOptions& o) {
  const uint64_t row_bytes = uint64_t{kUpdateHeads} * kUpdateHeadSize * 2;
  UpdateBuffers b;
  KVTIER_ASSIGN_OR_RETURN(b.cache,
                          gpu::DeviceBuffer::Create(backend, gpu::MemoryKind::kDevice,
                                                    row_bytes * o.update_batch * o.update_max_seq));
  KVTIER_ASSIGN_OR_RETURN(b.update,
                          gpu::DeviceBuffer::Create(backend, gpu::MemoryKind::kDevice,
                                                    row_bytes * o.update_batch * o.update_tokens));
  KVTIER_ASSIGN_OR_RETURN(b.indices, gpu::DeviceBuffer::Create(backend, gpu::MemoryKind::kDevice,
                                                               size_t{o.update_batch} * 4));
  std::vector<int32_t> writes(o.update_batch);
  for (uint32_t i = 0; i < o.update_batch; ++i) {
    writes[i] = static_cast<int32_t>((i * 997) % (o.update_max_seq - o.update_tokens + 1));
  }
  KVTIER_RETURN_IF_ERROR(backend.Copy(b.indices.data(), writes.data(), size_t{o.update_batch} * 4));
  return b;
}

Status RunUpdate(gpu::KernelBackend& backend, const PoolBenchOptions& o, UpdateBuffers& b,
                 PoolBenchResult& result) {
  const uint64_t update_bytes = b.update.size();
  const gpu::LinearUpdateArgs args{
      b.cache.data(), b.update.data(), b.indices.data(), gpu::IndexType::kInt32, KvDtype::kBf16,
      o.update_batch, kUpdateHeads,    o.update_max_seq, o.update_tokens,        kUpdateHeadSize};
  KVTIER_ASSIGN_OR_RETURN(
      const std::vector<double> gbps,
      TimedGbpsSideBySide(
          o.repeats, update_bytes,
          {[&] { return backend.UpdateLinear(args); },
           [&] { return backend.Copy(b.cache.data(), b.update.data(), update_bytes); }}));
  result.update_gbps = gbps[0];
  result.update_copy_gbps = gbps[1];
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
  if (o.update_batch == 0 || o.update_batch > 4096) {
    return InvalidArgumentError("pool bench: need 1 <= update_batch <= 4096");
  }
  if (o.update_tokens == 0 || o.update_tokens > o.update_max_seq || o.update_max_seq > (1u << 20)) {
    return InvalidArgumentError("pool bench: need 1 <= update_tokens <= update_max_seq <= 2^20");
  }
  if (o.block_bytes == 0 || o.block_bytes % 16 != 0) {
    return InvalidArgumentError("pool bench: block_bytes must be a positive multiple of 16");
  }
  PoolBenchResult result;
  KVTIER_RETURN_IF_ERROR(RunAllocFree(o, result));
  std::unique_ptr<gpu::KernelBackend> backend = PickBackend(o.allow_gpu);
  result.backend = std::string(backend->name());
  // Every buffer is allocated before any is timed or freed, as a worker allocates its pool once.
  KVTIER_ASSIGN_OR_RETURN(UpdateBuffers update, AllocateUpdate(*backend, o));
  KVTIER_RETURN_IF_ERROR(RunBlockCopies(*backend, o, result));
  KVTIER_RETURN_IF_ERROR(RunUpdate(*backend, o, update, result));
  return result;
}

}  // namespace kvtier::bench
