#include "common/deadline_heap.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace kvtier {
namespace {

using Heap = DeadlineHeap<uint32_t>;

// The owner's side: each id's current generation (0: no deadline).
struct Owner {
  std::map<uint32_t, uint32_t> generation;
  bool IsLive(const Heap::Entry& e) const {
    const auto it = generation.find(e.id);
    return it != generation.end() && it->second == e.generation;
  }
  void Set(Heap& heap, uint32_t id, int64_t deadline_ns) {
    heap.Push({deadline_ns, id, ++generation[id]},
              [this](const Heap::Entry& e) { return IsLive(e); });
  }
  std::vector<Heap::Entry> Due(Heap& heap, int64_t now_ns) {
    std::vector<Heap::Entry> due;
    heap.PopDue(
        now_ns, [this](const Heap::Entry& e) { return IsLive(e); },
        [&](const Heap::Entry& e) { due.push_back(e); });
    return due;
  }
};

TEST(DeadlineHeapTest, LiveDeadlinesComeDueEarliestFirst) {
  Heap heap;
  Owner owner;
  owner.Set(heap, 1, 300);
  owner.Set(heap, 2, 100);
  owner.Set(heap, 3, 200);
  ++owner.generation[3];  // id 3's deadline cancelled by its owner
  EXPECT_TRUE(owner.Due(heap, 99).empty());
  const std::vector<Heap::Entry> due = owner.Due(heap, 300);
  ASSERT_EQ(due.size(), 2u) << "id 3's stale entry is skipped";
  EXPECT_EQ(due[0].id, 2u);
  EXPECT_EQ(due[1].id, 1u);
  EXPECT_EQ(heap.size(), 0u) << "the stale entry left the heap too";
}

// A block committed again with its retention on every request replaces its deadline each
// time: the heap must not keep every one of them.
TEST(DeadlineHeapTest, ReplacedDeadlinesDoNotPileUp) {
  Heap heap;
  Owner owner;
  for (uint32_t id = 0; id < 100; ++id) owner.Set(heap, id, 1'000 + id);
  size_t most = 0;
  for (int round = 1; round <= 1'000; ++round) {
    for (uint32_t id = 0; id < 100; ++id) owner.Set(heap, id, 1'000 * (round + 1) + id);
    most = std::max(most, heap.size());
  }
  EXPECT_LE(most, 2 * 100 + 64 + 1) << "100 live deadlines, replaced 100,000 times";
  // Every id comes due once, at its last deadline.
  const std::vector<Heap::Entry> due = owner.Due(heap, 1'000 * 1'001 + 99);
  ASSERT_EQ(due.size(), 100u);
  for (uint32_t id = 0; id < 100; ++id) {
    EXPECT_EQ(due[id].id, id);
    EXPECT_EQ(due[id].deadline_ns, 1'000 * 1'001 + id);
  }
}

TEST(DeadlineHeapTest, CompactionKeepsEveryLiveDeadline) {
  Heap heap;
  Owner owner;
  // 500 ids with a deadline each; ids 0-249 then replaced (their old entries stale), enough
  // pushes to compact more than once.
  for (uint32_t id = 0; id < 500; ++id) owner.Set(heap, id, 10 * id);
  for (int round = 0; round < 8; ++round) {
    for (uint32_t id = 0; id < 250; ++id) owner.Set(heap, id, 10 * id + 1);
  }
  std::vector<Heap::Entry> due = owner.Due(heap, 10 * 500);
  ASSERT_EQ(due.size(), 500u);
  for (uint32_t i = 0; i < 500; ++i) {
    EXPECT_EQ(due[i].id, i);
    EXPECT_EQ(due[i].deadline_ns, 10 * i + (i < 250 ? 1 : 0));
  }
  int visited = 0;
  heap.ForEach([&](const Heap::Entry&) { ++visited; });
  EXPECT_EQ(visited, 0);
}

}  // namespace
}  // namespace kvtier
