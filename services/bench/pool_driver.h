// The worker pool benchmark behind `kvtier bench pool`.
//
//   alloc/free  A BlockPool of pool_blocks blocks; allocations of a uniform random
//               [min_alloc, max_alloc] blocks, each freed right after (the shape of vLLM's
//               benchmark_block_pool.py), on one thread for alloc_seconds. Reported as
//               blocks allocated and freed per second.
//   gather,     The kernel backend (CUDA when a device answers and the build has it, else
//   scatter     the CPU reference) copies batch_blocks random blocks of block_bytes between
//               a pool and a staging buffer in the pool's memory; `memcpy` is the same
//               bytes copied as one contiguous run by the backend's plain copy, in the
//               same run (the ceiling).
//   offload,    The same with staging in pinned host memory, beside plain pinned copies
//   onboard     in each direction (cudaMemcpy on a GPU).
//   update      UpdateLinear of update_batch sequences x 8 heads x update_tokens bf16 tokens
//               (head size 128) into an update_max_seq-token cache, beside a plain copy of
//               the same bytes.
//               Each operation is timed beside its references (gather, scatter and the
//               copy; offload, onboard and the two pinned copies; update and its copy):
//               `repeats` rounds, each calling every operation of the group once in turn,
//               after 50 ms of warm-up rounds; each figure is the median of its rounds.
//
// Thread safety: a function of its inputs; allocates about (pool_copy_blocks +
// batch_blocks) * block_bytes of memory.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace kvtier::bench {

struct PoolBenchOptions {
  uint32_t pool_blocks = 100000;
  uint32_t min_alloc = 10;
  uint32_t max_alloc = 1000;
  double alloc_seconds = 2.0;
  uint64_t block_bytes =
      2ull << 20;  // Llama-3-8B: 32 layers x 8 KV heads x 128 x 16 tokens x bf16 x K,V
  uint32_t batch_blocks = 16;
  uint32_t copy_pool_blocks = 64;
  uint32_t update_batch = 16;  // 16: 16 MiB moved; on a GPU use enough to overflow its L2
  uint32_t update_tokens = 512;
  uint32_t update_max_seq = 4096;
  uint32_t repeats = 15;
  bool allow_gpu = true;
};

struct PoolBenchResult {
  double alloc_free_per_sec = 0;
  uint64_t alloc_free_blocks = 0;
  std::string backend;  // "cpu" or "cuda"
  // Staging in the pool's own memory (device to device on a GPU):
  double gather_gbps = 0;   // pool -> staging
  double scatter_gbps = 0;  // staging -> pool
  double memcpy_gbps = 0;   // one contiguous copy of the same bytes
  // Staging in pinned host memory:
  double offload_gbps = 0;     // gather pool -> pinned
  double onboard_gbps = 0;     // scatter pinned -> pool
  double pinned_d2h_gbps = 0;  // one plain copy pool -> pinned
  double pinned_h2d_gbps = 0;  // one plain copy pinned -> pool
  // The linear KV update and a plain copy of the bytes it moves.
  double update_gbps = 0;
  double update_copy_gbps = 0;
};

[[nodiscard]] Result<PoolBenchResult> RunPoolBench(const PoolBenchOptions& options);

}  // namespace kvtier::bench
