// KeyTable and SlotCounts (index_storage.h) against std::map: random operations over a
// small key range (and, for KeyTable, a hash with few distinct homes) keep probe runs
// long and make backward-shift deletion wrap and collide.
#include "services/coordinator/index/index_storage.h"

#include <map>
#include <random>
#include <unordered_map>

#include <gtest/gtest.h>

namespace kvtier::coordinator::internal {
namespace {

// Eight homes for every key: runs of dozens of entries, so distances pass the slot's
// 5-bit cap (31) and deletion must read those entries' keys to find their homes.
struct EightHomes {
  uint64_t operator()(const BlockKey& key) const { return (key.hi % 8) * (UINT64_MAX / 8); }
};

struct TestBlock {
  StoredKey key;
};

template <typename Hash>
void CheckAgainstAMap(KeyTable<std::vector<TestBlock>, Hash>& table, uint32_t seed, int steps,
                      uint64_t key_range) {
  std::mt19937_64 rng(seed);
  std::vector<TestBlock> blocks;
  std::vector<uint32_t> free_blocks;
  std::unordered_map<uint64_t, uint32_t> model;  // key.hi -> block
  for (int step = 0; step < steps; ++step) {
    const BlockKey key{rng() % key_range, 0};
    const auto it = model.find(key.hi);
    if (it != model.end()) {
      ASSERT_EQ(table.Find(key, blocks), it->second) << "step " << step;
      table.Erase(key, it->second, blocks);
      free_blocks.push_back(it->second);
      model.erase(it);
    } else {
      ASSERT_EQ(table.Find(key, blocks), kNil) << "step " << step;
      uint32_t b;
      if (free_blocks.empty()) {
        b = static_cast<uint32_t>(blocks.size());
        blocks.push_back({});
      } else {
        b = free_blocks.back();
        free_blocks.pop_back();
      }
      blocks[b].key = StoredKey::From(key);
      table.Insert(key, b, blocks);
      model.emplace(key.hi, b);
    }
    ASSERT_EQ(table.size(), model.size());
    if (step % 500 == 0) {
      for (uint64_t k = 0; k < key_range; ++k) {
        const auto m = model.find(k);
        ASSERT_EQ(table.Find(BlockKey{k, 0}, blocks), m == model.end() ? kNil : m->second)
            << "key " << k;
      }
    }
  }
}

TEST(KeyTableTest, MatchesAMapWithAnEvenHash) {
  KeyTable<std::vector<TestBlock>> table(16);  // grows several times
  CheckAgainstAMap(table, 11, 200000, 3000);
}

TEST(KeyTableTest, MatchesAMapWhenEveryKeySharesOneOfEightHomes) {
  KeyTable<std::vector<TestBlock>, EightHomes> table(16);
  CheckAgainstAMap(table, 12, 60000, 400);
}

TEST(SlotCountsTest, MatchesAMapThroughRandomAddsAndSubtracts) {
  std::mt19937 rng(7);
  SlotCounts counts;
  std::map<uint32_t, uint32_t> model;
  for (int step = 0; step < 200000; ++step) {
    // Keys from a narrow range, half of them overflow references (the top bit set).
    const uint32_t key = (rng() % 600) | (rng() % 2 ? kOverflowRef : 0);
    const auto it = model.find(key);
    if (it != model.end() && rng() % 2) {
      const uint32_t n = 1 + rng() % it->second;
      const uint32_t left = it->second - n;
      ASSERT_EQ(counts.Subtract(key, n), left) << "step " << step;
      if (left == 0)
        model.erase(it);
      else
        it->second = left;
    } else {
      const uint32_t n = 1 + rng() % 3;
      counts.Add(key, n);
      model[key] += n;
    }
    ASSERT_EQ(counts.size(), model.size());
    if (step % 1000 == 0) {
      for (uint32_t k = 0; k < 600; ++k) {
        ASSERT_EQ(counts.Contains(k), model.contains(k)) << k;
        ASSERT_EQ(counts.Contains(k | kOverflowRef), model.contains(k | kOverflowRef)) << k;
        ASSERT_EQ(counts.Get(k), model.contains(k) ? model[k] : 0u) << k;
      }
    }
  }
  EXPECT_LE(counts.memory_bytes(), 2 * 1200 * 8 * 5 / 4 + 16 * 8)
      << "8 bytes per entry at load 0.8, grown by half";
}

// A slot's narrow count (16 bits) crossing into the wide table and back.
TEST(NarrowCountTest, CountsPastSixteenBitsMoveAsideAndBack) {
  SlotCounts wide;
  uint16_t narrow = kWideCount - 2;
  EXPECT_EQ(AddToCount(narrow, wide, 7, +1), 65'534u);
  EXPECT_EQ(narrow, 65'534u);
  EXPECT_EQ(AddToCount(narrow, wide, 7, +1), 65'535u) << "the first wide count";
  EXPECT_EQ(narrow, kWideCount);
  EXPECT_EQ(wide.Get(7), 65'535u);
  EXPECT_EQ(AddToCount(narrow, wide, 7, +100'000), 165'535u);
  EXPECT_EQ(CountOf(narrow, wide, 7), 165'535u);
  EXPECT_EQ(wide.size(), 1u);
  EXPECT_EQ(AddToCount(narrow, wide, 7, -100'001), 65'534u) << "narrow again";
  EXPECT_EQ(narrow, 65'534u);
  EXPECT_EQ(wide.size(), 0u) << "nothing left aside";
  EXPECT_EQ(AddToCount(narrow, wide, 7, -65'534), 0u);
}

TEST(SlotCountsTest, AnEmptyTableHoldsNothing) {
  SlotCounts counts;
  EXPECT_FALSE(counts.Contains(0));
  EXPECT_EQ(counts.size(), 0u);
  EXPECT_EQ(counts.memory_bytes(), 0u);
  counts.Add(5, 2);
  EXPECT_TRUE(counts.Contains(5));
  EXPECT_EQ(counts.Subtract(5, 2), 0u);
  EXPECT_FALSE(counts.Contains(5));
}

}  // namespace
}  // namespace kvtier::coordinator::internal
