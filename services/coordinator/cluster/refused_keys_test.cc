// RefusedKeys remembers, per node and up to a bound over all nodes, the blocks a full index left
// out.
#include "services/coordinator/cluster/refused_keys.h"

#include <gtest/gtest.h>

namespace kvtier::coordinator {
namespace {

std::vector<BlockKey> Keys(uint64_t first, size_t n) {
  const OpaqueKeyNamespace ns("test", "");
  std::vector<BlockKey> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(ns.Key(first + i));
  return keys;
}

TEST(RefusedKeysTest, KeysAreRememberedPerNode) {
  RefusedKeys refused(8);
  const auto abc = Keys(1, 3);
  refused.Add(2, abc);
  EXPECT_TRUE(refused.Contains(2, abc[1]));
  EXPECT_FALSE(refused.Contains(1, abc[1])) << "left out for node 2 only";
  EXPECT_FALSE(refused.Contains(7, abc[1])) << "a node never seen";
  refused.Add(2, abc);  // the same chain again: counted once
  EXPECT_EQ(refused.size(), 3u);
}

TEST(RefusedKeysTest, PastTheBoundTheOldestKeysAreForgotten) {
  RefusedKeys refused(4);
  const auto keys = Keys(1, 5);
  refused.Add(0, std::span(keys).first(2));       // node 0: 1, 2
  refused.Add(1, std::span(keys).subspan(2, 2));  // node 1: 3, 4 (4 of 4)
  refused.Add(0, std::span(keys).last(1));        // node 0: 5; node 0's 1 is the oldest
  EXPECT_FALSE(refused.Contains(0, keys[0]));
  EXPECT_TRUE(refused.Contains(0, keys[1]));
  EXPECT_TRUE(refused.Contains(1, keys[2]));
  EXPECT_TRUE(refused.Contains(0, keys[4]));
  EXPECT_EQ(refused.size(), 4u);
}

TEST(RefusedKeysTest, ForgetDropsOneNodesKeys) {
  RefusedKeys refused(8);
  const auto keys = Keys(1, 4);
  refused.Add(0, std::span(keys).first(2));
  refused.Add(1, std::span(keys).last(2));
  refused.Forget(0);
  refused.Forget(9);  // unknown: nothing happens
  EXPECT_FALSE(refused.Contains(0, keys[0]));
  EXPECT_TRUE(refused.Contains(1, keys[3]));
  EXPECT_EQ(refused.size(), 2u);
}

}  // namespace
}  // namespace kvtier::coordinator
