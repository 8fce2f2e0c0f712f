// What the BlockPool tests share: a pool of 4-token blocks, a root key, prompts of
// consecutive tokens. Test-only.
#pragma once

#include <memory>
#include <numeric>
#include <vector>

#include "services/worker/pool/block_pool.h"

namespace kvtier::worker::testing {

inline constexpr uint32_t kTpb = 4;
inline const BlockKey kRoot{1, 1};

inline std::unique_ptr<BlockPool> MakePool(uint32_t blocks, BlockPoolOptions options = {}) {
  options.num_blocks = blocks;
  options.tokens_per_block = kTpb;
  return BlockPool::Create(options).value();
}

// `count` tokens first, first + 1, ...
inline std::vector<uint32_t> Tokens(uint32_t first, uint32_t count) {
  std::vector<uint32_t> tokens(count);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

}  // namespace kvtier::worker::testing
