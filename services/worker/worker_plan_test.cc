#include "services/worker/worker_plan.h"

#include <gtest/gtest.h>

namespace kvtier::worker {
namespace {

WorkerConfig Gemma(std::vector<uint32_t> windows, uint32_t sinks = 0) {
  WorkerConfig c;
  c.num_layers = 6;
  c.max_attention_window = std::move(windows);
  c.sink_tokens = sinks;
  c.pool_bytes = 64ull << 20;
  c.free_memory_fraction = 1.0;
  return c;
}

TEST(WorkerPlanTest, EachWindowIsAPoolOfItsLayersTheListRepeatingOverThem) {
  const Result<WorkerPlan> plan = PlanWorkerPool(Gemma({1024, 8192, 8192}, 4), -1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->pools.size(), 2u);
  EXPECT_EQ(plan->pools[0].layers, (std::vector<uint32_t>{0, 3}));
  EXPECT_EQ(plan->pools[1].layers, (std::vector<uint32_t>{1, 2, 4, 5}));
  EXPECT_EQ(plan->pools[0].layout.Fingerprint(), "L2/H2/D64/T16/fp16/W1024/S4");
  EXPECT_EQ(plan->pools[1].layout.Fingerprint(), "L4/H2/D64/T16/fp16/W8192/S4");
  // Shares as TensorRT-LLM's: bytes per token times window, 2 x 1024 against 4 x 8192.
  const double bytes0 = double(plan->pools[0].blocks) * plan->pools[0].layout.bytes_per_block();
  const double bytes1 = double(plan->pools[1].blocks) * plan->pools[1].layout.bytes_per_block();
  EXPECT_NEAR(bytes1 / bytes0, (4.0 * 8192) / (2.0 * 1024), 0.1);
  EXPECT_LE(bytes0 + bytes1, double(64ull << 20));
  EXPECT_GT(bytes0 + bytes1, 0.99 * double(64ull << 20));
  EXPECT_NE(plan->Describe().find("worker pools 0: L2/H2/D64/T16/fp16/W1024/S4 (layers 0, 3)"),
            std::string::npos)
      << plan->Describe();
  EXPECT_EQ(plan->max_block_bytes(), plan->pools[1].layout.bytes_per_block());
}

TEST(WorkerPlanTest, OneWindowOrNoneIsOnePoolOfEveryLayer) {
  for (const std::vector<uint32_t>& windows : {std::vector<uint32_t>{}, {0}, {4096}}) {
    const Result<WorkerPlan> plan = PlanWorkerPool(Gemma(windows), -1);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->pools.size(), 1u);
    EXPECT_EQ(plan->pools[0].layout.num_layers(), 6u);
    EXPECT_EQ(plan->pools[0].layout.attention_window(), windows.empty() ? 0 : windows[0]);
    EXPECT_EQ(plan->Describe().rfind("worker pool L6/", 0), 0u) << plan->Describe();
  }
}

TEST(WorkerPlanTest, MaxTokensCapsEveryPool) {
  WorkerConfig c = Gemma({1024, 8192}, 4);
  c.max_tokens = 160;  // 10 blocks of 16 tokens
  const Result<WorkerPlan> plan = PlanWorkerPool(c, -1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const PlannedPool& p : plan->pools) EXPECT_EQ(p.blocks, 10u);
}

TEST(WorkerPlanTest, ListsThatCannotBePoolsAreRefusedByName) {
  const Status mixed = PlanWorkerPool(Gemma({1024, 0}), -1).status();
  EXPECT_EQ(mixed.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mixed.message().find("worker.max_attention_window mixes 0"), std::string::npos) << mixed;
  const Status sinks = PlanWorkerPool(Gemma({}, 4), -1).status();
  EXPECT_NE(sinks.message().find("worker.sink_tokens 4 needs windowed"), std::string::npos) << sinks;
  const Status big_sinks = PlanWorkerPool(Gemma({1024, 16}, 16), -1).status();
  EXPECT_EQ(big_sinks.code(), StatusCode::kInvalidArgument) << big_sinks;
  EXPECT_NE(big_sinks.message().find("worker pool of window 16"), std::string::npos) << big_sinks;
}

}  // namespace
}  // namespace kvtier::worker
