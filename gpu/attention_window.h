// AttentionWindow: the positions a query of a windowed layer sees (internal to gpu/; the
// CPU reference and the CUDA kernels share it). A query at position p sees the first
// `sinks` positions and those above p - window; window 0 is full attention. Table entries
// of blocks that no query of a chunk sees are never read, so a windowed sequence's table
// may hold anything there (kNoBlock, where the pool let the block go).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KVTIER_HOST_DEVICE __host__ __device__
#else
#define KVTIER_HOST_DEVICE
#endif

namespace kvtier::gpu::internal {

struct AttentionWindow {
  uint32_t window = 0;  // tokens; 0: full attention
  uint32_t sinks = 0;   // tokens at the start every query sees

  // Whether the query that sees positions [0, visible) (it is at visible - 1) sees `j`.
  KVTIER_HOST_DEVICE bool Sees(uint32_t j, uint32_t visible) const {
    return window == 0 || j < sinks || uint64_t{j} + window >= visible;
  }
  // Whether any query of a chunk whose first query sees [0, first_visible) reads table
  // entry `entry` (blocks of `tokens_per_block`): later queries see no earlier position.
  KVTIER_HOST_DEVICE bool Reads(uint32_t entry, uint32_t tokens_per_block,
                                uint32_t first_visible) const {
    if (window == 0) return true;
    const uint64_t begin = uint64_t{entry} * tokens_per_block;
    return begin < sinks || begin + tokens_per_block + window > first_visible;
  }
};

}  // namespace kvtier::gpu::internal
