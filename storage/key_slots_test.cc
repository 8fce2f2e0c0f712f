#include "storage/key_slots.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <utility>

namespace kvtier::storage {
namespace {

TEST(KeySlotsTest, FindsWhatWasInsertedUnderItsFormatOnly) {
  KeySlots slots;
  const BlockKey a{0x1111, 1}, b{0x2222, 2};
  EXPECT_EQ(slots.Find(0, a), KeySlots::kEmpty) << "empty table";
  slots.Insert(0, a, 7);
  slots.Insert(1, a, 8);  // the same key under another format: another entry
  slots.Insert(0, b, 9);
  EXPECT_EQ(slots.Find(0, a), 7u);
  EXPECT_EQ(slots.Find(1, a), 8u);
  EXPECT_EQ(slots.Find(0, b), 9u);
  EXPECT_EQ(slots.Find(1, b), KeySlots::kEmpty);
  EXPECT_TRUE(slots.Erase(0, a));
  EXPECT_FALSE(slots.Erase(0, a)) << "erased already";
  EXPECT_EQ(slots.Find(0, a), KeySlots::kEmpty);
  EXPECT_EQ(slots.Find(1, a), 8u);
  EXPECT_EQ(slots.size(), 2u);
}

// Random inserts and erases over a small key space (long probe runs, growth, erasures
// in the middle of runs and across the array's end), checked against std::map after
// every step: every key present is found with its id, every key absent is not.
TEST(KeySlotsTest, MatchesAMapThroughRandomInsertsAndErases) {
  KeySlots slots;
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> model;
  std::mt19937_64 rng(42);
  const auto key_of = [](uint64_t n) {
    return BlockKey{n * 0x10001, n};
  };  // opaque-looking, low-entropy keys
  for (uint32_t step = 0; step < 20000; ++step) {
    const uint32_t format = static_cast<uint32_t>(rng() % 2);
    const uint64_t n = rng() % 300;
    const auto at = std::make_pair(format, n);
    if (model.count(at) == 0 && rng() % 3 != 0) {
      slots.Insert(format, key_of(n), step);
      model[at] = step;
    } else {
      EXPECT_EQ(slots.Erase(format, key_of(n)), model.erase(at) == 1) << "step " << step;
    }
    if (step % 97 != 0) continue;
    ASSERT_EQ(slots.size(), model.size());
    for (uint32_t f = 0; f < 2; ++f) {
      for (uint64_t k = 0; k < 300; ++k) {
        const auto it = model.find({f, k});
        ASSERT_EQ(slots.Find(f, key_of(k)), it == model.end() ? KeySlots::kEmpty : it->second)
            << "format " << f << " key " << k << " at step " << step;
      }
    }
  }
  size_t seen = 0;
  slots.ForEachId([&](uint32_t) { ++seen; });
  EXPECT_EQ(seen, model.size());
}

}  // namespace
}  // namespace kvtier::storage
