// Replays small hand-made traces through a real embedded cluster and checks the report
// against what the capacities must produce.
#include "services/cli/replay.h"

#include <gtest/gtest.h>

#include "services/auth/token_store.h"
#include "services/bench/chat_workload.h"
#include "services/cli/embedded_cluster.h"
#include "tests/testing/test_util.h"

namespace kvtier::cli {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kTokensPerBlock = 16;
constexpr uint64_t kBlockBytes = 4096;  // 1 layer x 1 head x 64 dims x 16 tokens x fp16 x K,V

bench::TraceRequest Request(std::vector<uint64_t> ids, uint32_t input_length = 0) {
  bench::TraceRequest r;
  r.input_length =
      input_length != 0 ? input_length : static_cast<uint32_t>(ids.size()) * kTokensPerBlock;
  r.hash_ids = std::move(ids);
  return r;
}

class ReplayTest : public ::testing::Test {
 protected:
  // A cluster whose pool holds `gpu_blocks`, with a host tier of `host_blocks` (0: none);
  // with `windows`, a layer per window and a pool per distinct one.
  void Start(uint64_t gpu_blocks, uint64_t host_blocks, std::vector<uint32_t> windows = {}) {
    EmbeddedClusterOptions options;
    options.config.data_dir = dir_.path();
    options.config.coordinator.listen = {"127.0.0.1:0"};
    options.config.worker = {.num_layers = 1,
                             .num_kv_heads = 1,
                             .head_dim = 64,
                             .tokens_per_block = kTokensPerBlock,
                             .dtype = "fp16",
                             .pool_bytes = gpu_blocks * kBlockBytes,
                             .free_memory_fraction = 1.0};
    if (!windows.empty()) {
      options.config.worker.num_layers = static_cast<uint32_t>(windows.size());
      options.config.worker.max_attention_window = std::move(windows);
    }
    options.config.store = {.host_cache_bytes = host_blocks * kBlockBytes, .disk_bytes = 0};
    options.registry = &registry_;
    options.event_tick = 10ms;
    cluster_ = EmbeddedCluster::Create(std::move(options)).value();
  }

  Result<ReplayReport> Replay(const std::vector<bench::TraceRequest>& requests,
                              uint32_t clients = 1, uint32_t prefill_chunk_blocks = 0) {
    ReplayOptions options;
    options.clients = clients;
    options.prefill_chunk_blocks = prefill_chunk_blocks;
    options.tokens_per_block = kTokensPerBlock;
    options.connect = [this] {
      return client::Client::Connect({.address = cluster_->endpoints()[0], .token = "auth is off"});
    };
    return RunReplay(requests, options);
  }

  testing::TempDir dir_;
  MetricsRegistry registry_;
  std::unique_ptr<EmbeddedCluster> cluster_;
};

TEST_F(ReplayTest, RoomForEverythingReachesTheUnboundedBound) {
  Start(/*gpu_blocks=*/64, /*host_blocks=*/0);
  // Request 2 shares blocks 1,2 with request 1; request 3 shares block 1 only, and its
  // last block is 4 tokens long.
  const std::vector<bench::TraceRequest> requests = {Request({1, 2, 3}), Request({1, 2, 4, 5}),
                                                     Request({1, 6}, kTokensPerBlock + 4)};
  auto report = Replay(requests);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->requests, 3u);
  EXPECT_EQ(report->blocks, 9u);
  EXPECT_EQ(report->hit_blocks_gpu, 3u);  // 2 + 1
  EXPECT_EQ(report->hit_blocks_host + report->hit_blocks_disk, 0u);
  EXPECT_EQ(report->bound_hit_blocks, 3u);
  EXPECT_DOUBLE_EQ(report->block_hit_rate(), 3.0 / 9.0);
  EXPECT_EQ(report->tokens, 3u * 16 + 4u * 16 + 20u);
  EXPECT_EQ(report->hit_tokens, 3u * 16);
  EXPECT_EQ(report->refused_requests, 0u);
  EXPECT_GT(report->lookup_p99_us, 0);
}

TEST_F(ReplayTest, EvictedBlocksComeBackFromTheHostTier) {
  // A pool of 4 blocks over a host tier of 16: the first prompt's blocks are pushed out
  // of the pool by the second and onboarded back for the third.
  Start(/*gpu_blocks=*/4, /*host_blocks=*/16);
  const std::vector<bench::TraceRequest> requests = {Request({1, 2, 3, 4}), Request({5, 6, 7, 8}),
                                                     Request({1, 2, 3, 4})};
  auto report = Replay(requests);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->hit_blocks_gpu, 0u);
  EXPECT_EQ(report->hit_blocks_host, 4u);
  EXPECT_EQ(report->bound_hit_blocks, 4u);
  EXPECT_GE(report->offloaded_blocks, 4u);
  const std::string json = ReplayReportJson(*report);
  for (const char* field :
       {"\"block_hit_rate\": 0.333333", "\"token_hit_rate\": 0.333333",
        "\"hits_by_tier\": {\"gpu\": 0, \"host\": 4, \"disk\": 0, \"remote\": 0}",
        "\"requests\": 3", "\"lookup_p99_us\": "}) {
    EXPECT_NE(json.find(field), std::string::npos) << field << " in " << json;
  }
}

TEST_F(ReplayTest, WithoutTheLowerTiersTheSamePromptsMiss) {
  Start(/*gpu_blocks=*/4, /*host_blocks=*/0);
  auto report = Replay({Request({1, 2, 3, 4}), Request({5, 6, 7, 8}), Request({1, 2, 3, 4})});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->hit_blocks(), 0u) << "blocks 1-4 were evicted and dropped";
  EXPECT_EQ(report->bound_hit_blocks, 4u);
}

TEST_F(ReplayTest, ConcurrentClientsReplayTheChatWorkload) {
  Start(/*gpu_blocks=*/2048, /*host_blocks=*/0);
  std::vector<bench::TraceRequest> requests = bench::GenerateChatWorkload({.conversations = 40});
  auto report = Replay(requests, /*clients=*/4);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->requests, requests.size());
  EXPECT_EQ(report->refused_requests, 0u);
  // Room for everything; with four clients a request can overtake the one it extends, so
  // the hits are at most the bound and most of it.
  EXPECT_LE(report->hit_blocks(), report->bound_hit_blocks);
  EXPECT_GT(report->hit_blocks(), report->bound_hit_blocks / 2);
}

TEST_F(ReplayTest, ConnectionAndLayoutErrorsStopTheReplay) {
  Start(/*gpu_blocks=*/4, /*host_blocks=*/0);
  ReplayOptions options;
  options.tokens_per_block = kTokensPerBlock;
  options.connect = [] {
    return Result<std::unique_ptr<client::Client>>(UnavailableError("no cluster"));
  };
  EXPECT_EQ(RunReplay(std::vector<bench::TraceRequest>{Request({1})}, options).status().code(),
            StatusCode::kUnavailable);
  // Trace blocks of 8 tokens cannot be made of the cluster's 16-token blocks.
  options.connect = [this] {
    return client::Client::Connect({.address = cluster_->endpoints()[0], .token = "x"});
  };
  options.tokens_per_block = 8;
  auto wrong = RunReplay(std::vector<bench::TraceRequest>{Request({1, 2, 3})}, options);
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument) << wrong.status();
  EXPECT_NE(wrong.status().message().find("blocks of 16 tokens"), std::string::npos)
      << wrong.status();
  // Trace blocks of no tokens: refused before any client connects.
  int connects = 0;
  options.connect = [&] {
    ++connects;
    return client::Client::Connect({.address = cluster_->endpoints()[0], .token = "x"});
  };
  options.tokens_per_block = 0;
  auto empty = RunReplay(std::vector<bench::TraceRequest>{Request({1})}, options);
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument) << empty.status();
  EXPECT_NE(empty.status().message().find("tokens_per_block"), std::string::npos) << empty.status();
  EXPECT_EQ(connects, 0);
}

TEST_F(ReplayTest, TraceBlocksSpanSeveralClusterBlocks) {
  // Trace blocks of 64 tokens on a cluster of 16-token blocks: four cluster blocks each.
  Start(/*gpu_blocks=*/64, /*host_blocks=*/0);
  ReplayOptions options;
  options.tokens_per_block = 64;
  options.connect = [this] {
    return client::Client::Connect({.address = cluster_->endpoints()[0], .token = "x"});
  };
  std::vector<bench::TraceRequest> requests = {Request({1, 2}, 128), Request({1, 2, 3}, 150)};
  auto report = RunReplay(requests, options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->blocks, 5u);
  EXPECT_EQ(report->hit_blocks_gpu, 2u);
  EXPECT_EQ(report->hit_tokens, 128u);
  EXPECT_EQ(report->tokens, 278u);
}

// Layers of a 32-token window (2 blocks) and of a 64-token one: a pool each, spanned by
// every sequence, prefilled by chunks of 2 blocks. Each turn of a conversation extends
// the last: it reuses all of it, the 2-block pool by its last window alone.
TEST_F(ReplayTest, ASequenceSpansThePoolsOfEveryWindowAndReusesByChunks) {
  Start(/*gpu_blocks=*/96, /*host_blocks=*/0, {32, 64});
  const std::vector<bench::TraceRequest> requests = {Request({1, 2, 3, 4, 5, 6}),
                                                     Request({1, 2, 3, 4, 5, 6, 7, 8}),
                                                     Request({1, 2, 3, 4, 5, 6, 7, 8, 9})};
  auto report = Replay(requests, 1, /*prefill_chunk_blocks=*/2);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->pools,
            (std::vector<std::string>{"L1/H1/D64/T16/fp16/W32/S0", "L1/H1/D64/T16/fp16/W64/S0"}));
  EXPECT_EQ(report->block_bytes, 2 * kBlockBytes) << "a block of each pool";
  EXPECT_EQ(report->hit_blocks_gpu, 6u + 8u);
  EXPECT_EQ(report->refused_requests, 0u);
  auto node = client::Client::Connect({.address = cluster_->endpoints()[0], .token = "x"});
  ASSERT_TRUE(node.ok());
  const client::WorkerStats stats = (*node)->GetWorkerStats().value();
  ASSERT_TRUE(stats.cluster_counts) << "auth is off: the counts are the node's";
  EXPECT_EQ(stats.reuse_hits, 2 * (6u + 8u)) << "reused in both pools";
  EXPECT_NE(ReplayReportJson(*report).find("\"pools\": [\"L1/H1/D64/T16/fp16/W32/S0\", "),
            std::string::npos);
}

TEST(SequenceKvSavedTest, AWindowedLayerHoldsItsSinksAndWindowOfEachPrompt) {
  // Prompts of 10 and 2 blocks of 16 tokens; one full layer, one of a 32-token window
  // with 16 sinks (3 blocks): 12 blocks for the full layer, 3 + 2 for the windowed one.
  const std::vector<bench::TraceRequest> requests = {Request({1}, 160), Request({2}, 20)};
  const std::vector<uint32_t> windows = {0, 32};
  EXPECT_DOUBLE_EQ(SequenceKvSaved(requests, 16, windows, 16), 1.0 - (12.0 + 5.0) / 24.0);
  const std::vector<uint32_t> full = {0, 0};
  EXPECT_DOUBLE_EQ(SequenceKvSaved(requests, 16, full, 0), 0.0);
  EXPECT_DOUBLE_EQ(SequenceKvSaved({}, 16, windows, 16), 0.0);
}

}  // namespace
}  // namespace kvtier::cli
