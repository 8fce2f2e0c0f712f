// Test helpers shared by the worker's tests: a small layout, chain keys and token runs.
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

#include "common/block_key.h"
#include "common/kv_layout.h"

namespace kvtier::worker::testing {

// 2 layers x 2 KV heads x 8 dims x 4 tokens x fp16 x K,V = 512 bytes per block.
inline KvLayout TestLayout() {
  return KvLayout::Create({.num_layers = 2, .num_kv_heads = 2, .head_dim = 8, .tokens_per_block = 4, .dtype = KvDtype::kFp16})
      .value();
}

inline constexpr BlockKey kRoot{3, 3};
inline BlockKey Key(uint64_t n) { return BlockKey{0x2000 + n, n}; }

// Tokens first .. first + count - 1.
inline std::vector<uint32_t> Tokens(uint32_t first, uint32_t count) {
  std::vector<uint32_t> t(count);
  std::iota(t.begin(), t.end(), first);
  return t;
}

}  // namespace kvtier::worker::testing
