#include "services/coordinator/index/block_tokens.h"

#include <map>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

namespace kvtier::coordinator::internal {
namespace {

using Children = std::map<uint32_t, std::vector<uint32_t>>;  // block -> tokens

Children ChildrenOf(const BlockTokens& tokens, uint64_t group) {
  Children out;
  tokens.ForEachChild(group, [&](uint32_t block, std::span<const uint32_t> t) {
    EXPECT_TRUE(out.emplace(block, std::vector<uint32_t>(t.begin(), t.end())).second)
        << "block " << block << " twice";
  });
  return out;
}

TEST(BlockTokensTest, SiblingsLeaveFromAnyPlaceInTheirGroup) {
  BlockTokens tokens;
  // Blocks 1, 2, 3 are children of block 0; block 0 and block 7 are first blocks of scope 5.
  tokens.Set(0, BlockTokens::RootGroup(5), std::vector<uint32_t>{100, 101});
  tokens.Set(7, BlockTokens::RootGroup(5), std::vector<uint32_t>{700});
  for (uint32_t b = 1; b <= 3; ++b) tokens.Set(b, 0, std::vector<uint32_t>{b, b + 10, b + 20});
  EXPECT_EQ(ChildrenOf(tokens, 0).size(), 3u);
  EXPECT_EQ(ChildrenOf(tokens, BlockTokens::RootGroup(5)), (Children{{0, {100, 101}}, {7, {700}}}));
  EXPECT_TRUE(ChildrenOf(tokens, BlockTokens::RootGroup(6)).empty())
      << "another scope's first blocks";
  tokens.Erase(2, 0);  // the middle of the list
  EXPECT_EQ(ChildrenOf(tokens, 0), (Children{{1, {1, 11, 21}}, {3, {3, 13, 23}}}));
  tokens.Erase(3, 0);  // the head (latest first)
  tokens.Erase(3, 0);  // twice: ignored
  EXPECT_EQ(ChildrenOf(tokens, 0), (Children{{1, {1, 11, 21}}}));
  tokens.Erase(1, 0);
  EXPECT_TRUE(ChildrenOf(tokens, 0).empty());
  EXPECT_EQ(tokens.blocks(), 2u);
  // Block 2's record is reused for block 9 (same size): its tokens are 9's, not 2's.
  tokens.Set(9, 0, std::vector<uint32_t>{9, 19, 29});
  EXPECT_EQ(ChildrenOf(tokens, 0), (Children{{9, {9, 19, 29}}}));
}

TEST(BlockTokensTest, TheLastBlockLeavingFreesEverything) {
  BlockTokens tokens;
  const size_t empty = tokens.memory_bytes();
  for (uint32_t b = 0; b < 5000; ++b)
    tokens.Set(b, b == 0 ? BlockTokens::RootGroup(0) : b - 1, std::vector<uint32_t>(16, b));
  // 16 tokens and 20 bytes of links and table entries per block, plus growth slack.
  EXPECT_GE(tokens.memory_bytes(), 5000u * (16 * 4 + 20));
  EXPECT_LE(tokens.memory_bytes(), 5000u * (16 * 4 + 20) * 3 / 2 + 8192);
  for (uint32_t b = 5000; b-- > 0;) tokens.Erase(b, b == 0 ? BlockTokens::RootGroup(0) : b - 1);
  EXPECT_EQ(tokens.blocks(), 0u);
  EXPECT_EQ(tokens.memory_bytes(), empty);
}

// Random sets and erases over a few groups, with token counts of 1 to 4 (records of
// several sizes reused), against a plain map.
TEST(BlockTokensTest, RandomOperationsMatchAMap) {
  std::mt19937_64 rng(11);
  BlockTokens tokens;
  std::map<uint32_t, std::pair<uint64_t, std::vector<uint32_t>>> model;  // block -> group, tokens
  const std::vector<uint64_t> groups = {BlockTokens::RootGroup(0), BlockTokens::RootGroup(1), 3,
                                        4000, 70000};
  for (int step = 0; step < 50000; ++step) {
    const auto block = static_cast<uint32_t>(rng() % 3000);
    if (const auto it = model.find(block); it != model.end()) {
      tokens.Erase(block, it->second.first);
      model.erase(it);
    } else {
      const uint64_t group = groups[rng() % groups.size()];
      std::vector<uint32_t> t(1 + rng() % 4);
      for (uint32_t& token : t) token = static_cast<uint32_t>(rng());
      tokens.Set(block, group, t);
      model[block] = {group, t};
    }
    if (step % 997 != 0) continue;
    ASSERT_EQ(tokens.blocks(), model.size()) << "step " << step;
    for (const uint64_t group : groups) {
      Children want;
      for (const auto& [b, entry] : model) {
        if (entry.first == group) want[b] = entry.second;
      }
      ASSERT_EQ(ChildrenOf(tokens, group), want) << "step " << step << " group " << group;
    }
  }
}

}  // namespace
}  // namespace kvtier::coordinator::internal
