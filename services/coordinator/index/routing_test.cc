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
  const RouteChoice choice = ChooseWorker(Scores({{1, 8, 8.0}, {2, 3, 3.0}}), 10, idle);
  EXPECT_EQ(choice.node, 1);
  EXPECT_EQ(choice.prefix_blocks, 8u);
  EXPECT_DOUBLE_EQ(choice.cost, 2.0);  // 2 blocks to prefill
}

TEST(RoutingTest, LoadOutweighsASmallPrefix) {
  // Worker 0 holds the 1-block system prompt but runs 50 blocks of work; worker 1 is idle.
  const std::vector<WorkerLoad> loads = {{0, 50}, {1, 0}};
  EXPECT_EQ(ChooseWorker(Scores({{0, 1, 1.0}}), 20, loads).node, 1);
  // A long cached prefix is worth the queue.
  EXPECT_EQ(ChooseWorker(Scores({{0, 100, 100.0}}), 120, {{{0, 50}, {1, 0}}}).node, 0);
}

TEST(RoutingTest, TiesPreferLongerPrefixThenLowerId) {
  const std::vector<WorkerLoad> loads = {{3, 4}, {2, 0}, {5, 0}};
  // Worker 3: 6 to prefill + 4 active = 10; worker 2: 10 + 0 = 10; worker 5 too.
  EXPECT_EQ(ChooseWorker(Scores({{3, 4, 4.0}}), 10, loads).node, 3);
  EXPECT_EQ(ChooseWorker(Scores({}), 10, std::vector<WorkerLoad>{{5, 0}, {2, 0}}).node, 2);
}

}  // namespace
}  // namespace kvtier::coordinator
