#include "services/worker/pool/pool_sizing.h"

#include <gtest/gtest.h>

namespace kvtier::worker {
namespace {

// 2 layers x 2 KV heads x 64 dims x 16 tokens x fp16 x K,V = 16 KiB per block.
KvLayout Layout(uint32_t window, uint32_t kv_heads = 2) {
  return KvLayout::Create({.num_layers = 2,
                           .num_kv_heads = kv_heads,
                           .head_dim = 64,
                           .tokens_per_block = 16,
                           .dtype = KvDtype::kFp16,
                           .attention_window = window})
      .value();
}

constexpr uint64_t kBlock = 16 * 1024;

TEST(PoolSizingTest, FractionOfFreeMemoryDividedAmongPools) {
  // 100 MiB free, 0.9 of it for KV: 90 MiB; a full-attention pool gets 3/4, a windowed 1/4.
  auto sizes =
      SizePools({.free_bytes = 100 << 20, .pools = {{Layout(0), 0.75}, {Layout(4096), 0.25}}});
  ASSERT_TRUE(sizes.ok()) << sizes.status().ToString();
  ASSERT_EQ(sizes->size(), 2u);
  EXPECT_EQ((*sizes)[0].num_blocks, static_cast<uint32_t>(90.0 * 0.75 * (1 << 20) / kBlock));
  EXPECT_EQ((*sizes)[1].num_blocks, static_cast<uint32_t>(90.0 * 0.25 * (1 << 20) / kBlock));
  for (const PoolSize& s : *sizes) {
    EXPECT_LE(s.bytes, s.budget_bytes) << "never beyond the budget";
    EXPECT_FALSE(s.capped_by_max_tokens);
  }
}

TEST(PoolSizingTest, TheSmallerOfMaxTokensAndTheFractionWins) {
  // max_tokens 1000 needs ceil(1000 / 16) = 63 blocks: fewer than the 5760 memory allows.
  auto capped =
      SizePools({.free_bytes = 100 << 20, .max_tokens = 1000, .pools = {{Layout(0), 1.0}}});
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ((*capped)[0].num_blocks, 63u);
  EXPECT_TRUE((*capped)[0].capped_by_max_tokens);
  // A huge max_tokens: memory is the smaller limit.
  auto memory = SizePools({.free_bytes = 1 << 20,
                           .free_memory_fraction = 0.5,
                           .max_tokens = 1u << 30,
                           .pools = {{Layout(0), 1.0}}});
  ASSERT_TRUE(memory.ok());
  EXPECT_EQ((*memory)[0].num_blocks, 32u);  // 512 KiB / 16 KiB
  EXPECT_FALSE((*memory)[0].capped_by_max_tokens);
}

TEST(PoolSizingTest, BadConfigurationsNameWhatIsWrong) {
  auto tiny = SizePools({.free_bytes = 10000, .pools = {{Layout(0), 1.0}}});
  EXPECT_EQ(tiny.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(
      tiny.status().message().find(
          "pool 0 (window full, 2 KV heads): its budget of 9000 bytes is below one block of 16384"),
      std::string::npos)
      << tiny.status().message();
  EXPECT_EQ(
      SizePools({.free_bytes = 1 << 30, .free_memory_fraction = 1.5, .pools = {{Layout(0), 1.0}}})
          .status()
          .code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(SizePools({.free_bytes = 1 << 30, .pools = {{Layout(0), 0.7}, {Layout(64), 0.7}}})
                .status()
                .code(),
            StatusCode::kInvalidArgument)
      << "shares sum to 1.4";
  const Status repeated =
      SizePools({.free_bytes = 1 << 30, .pools = {{Layout(64), 0.5}, {Layout(64), 0.5}}}).status();
  EXPECT_NE(repeated.message().find("one pool per (attention window, KV heads)"), std::string::npos)
      << repeated.message();
  EXPECT_TRUE(
      SizePools({.free_bytes = 1 << 30, .pools = {{Layout(64, 2), 0.5}, {Layout(64, 4), 0.5}}})
          .ok())
      << "same window, other KV heads: two pools";
  EXPECT_EQ(SizePools({.free_bytes = 1 << 30}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::worker
