#include "services/coordinator/index/routing.h"

#include <gtest/gtest.h>

namespace kvtier::coordinator {
namespace {

LookupResult Scores(std::initializer_list<NodeScore> scores) {
  LookupResult r;
  r.scores = scores;
  return r;
}

TEST(RoutingTest, IdleWorkersGoToTheLongestPrefix) {
  const std::vector<WorkerLoad> idle = {{0, 0}, {1, 0}, {2, 0}};
  const RouteChoice choice = ChooseWorker(Scores({{1, 8, 8.0}, {2, 3, 3.0}}), {10, 0}, idle);
  EXPECT_EQ(choice.node, 1);
  EXPECT_EQ(choice.prefix_blocks, 8u);
  EXPECT_DOUBLE_EQ(choice.cost, 2.0);  // 2 blocks to prefill
}

TEST(RoutingTest, LoadOutweighsASmallPrefix) {
  // Worker 0 holds the 1-block system prompt but runs 50 blocks of work; worker 1 is idle.
  const std::vector<WorkerLoad> loads = {{0, 50}, {1, 0}};
  EXPECT_EQ(ChooseWorker(Scores({{0, 1, 1.0}}), {20, 0}, loads).node, 1);
  // A long cached prefix is worth the queue.
  EXPECT_EQ(ChooseWorker(Scores({{0, 100, 100.0}}), {120, 0}, {{{0, 50}, {1, 0}}}).node, 0);
}

TEST(RoutingTest, TiesPreferLongerPrefixThenLowerId) {
  const std::vector<WorkerLoad> loads = {{3, 4}, {2, 0}, {5, 0}};
  // Worker 3: 6 to prefill + 4 active = 10; worker 2: 10 + 0 = 10; worker 5 too.
  EXPECT_EQ(ChooseWorker(Scores({{3, 4, 4.0}}), {10, 0}, loads).node, 3);
  EXPECT_EQ(ChooseWorker(Scores({}), {10, 0}, std::vector<WorkerLoad>{{5, 0}, {2, 0}}).node, 2);
}

TEST(RoutingTest, ReusableTailTokensTipTheChoice) {
  // Both idle workers hold the prompt's 4 full blocks; of its 10 tail tokens (blocks of 16),
  // worker 1 can reuse 8 and worker 2 none.
  LookupResult lookup = Scores({{1, 4, 4.5, 8}, {2, 4, 4.0, 0}});
  lookup.partial.tokens = 8;
  lookup.partial.block_tokens = 16;
  const std::vector<WorkerLoad> idle = {{2, 0}, {1, 0}};
  const RouteChoice choice = ChooseWorker(lookup, {4, 10}, idle);
  EXPECT_EQ(choice.node, 1);
  EXPECT_EQ(choice.partial_tokens, 8u);
  EXPECT_DOUBLE_EQ(choice.cost, 2.0 / 16) << "2 tail tokens left to compute";
  // Worker 2 alone: the whole tail, 10/16 of a block.
  EXPECT_DOUBLE_EQ(ChooseWorker(lookup, {4, 10}, std::vector<WorkerLoad>{{2, 0}}).cost, 10.0 / 16);
  // A reusable tail is worth less than one active block of load.
  EXPECT_EQ(ChooseWorker(lookup, {4, 10}, std::vector<WorkerLoad>{{1, 1}, {2, 0}}).node, 2);
}

TEST(RoutingTest, TailWithoutAPartialMatchCostsEveryWorkerAlike) {
  // Nothing matched the tail: its size is unknown in blocks and left out for all.
  const std::vector<WorkerLoad> idle = {{0, 0}, {1, 0}};
  const RouteChoice choice = ChooseWorker(Scores({{1, 3, 3.0}}), {5, 7}, idle);
  EXPECT_EQ(choice.node, 1);
  EXPECT_DOUBLE_EQ(choice.cost, 2.0);
}

}  // namespace
}  // namespace kvtier::coordinator
