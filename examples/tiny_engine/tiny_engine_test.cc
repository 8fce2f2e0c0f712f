// The example engine against a real embedded cluster: with the cache (cold, warm, after a
// partial reuse, and after the prompt's blocks went down to the host tier and came back)
// it produces what recomputation without any cache produces, whatever its prefill chunk
// (one token, chunks that cross block boundaries, the whole prompt at once), over an fp32
// pool exactly and over int8, fp8 e4m3 and int4 pools within each one's tolerance.
#include "examples/tiny_engine/tiny_engine.h"

#include <gtest/gtest.h>

#include <numeric>

#include "services/cli/embedded_cluster.h"
#include "tests/testing/test_util.h"

namespace kvtier::examples {
namespace {

using namespace std::chrono_literals;

constexpr TinyModelShape kShape{
    .vocab = 64, .model = 32, .layers = 2, .query_heads = 4, .kv_heads = 2, .head_dim = 8};
constexpr uint32_t kTokensPerBlock = 4;

// The hidden states' tolerance against recomputation, by pool dtype: fp32 up to the order
// of float sums; a quantized pool's rounding of keys and values (kv_layout.h) besides.
float Tolerance(const std::string& dtype) {
  if (dtype == "int8") return 0.02f;
  if (dtype == "fp8_e4m3") return 0.08f;
  if (dtype == "int4") return 0.3f;
  return 1e-4f;
}

class TinyEngineTest : public ::testing::TestWithParam<std::tuple<uint32_t, const char*>> {
 protected:
  static uint32_t ChunkTokens() { return std::get<0>(GetParam()); }
  static std::string Dtype() { return std::get<1>(GetParam()); }

  void Start(uint32_t pool_blocks) {
    const uint64_t block_bytes = KvLayout::Create({.num_layers = kShape.layers,
                                                   .num_kv_heads = kShape.kv_heads,
                                                   .head_dim = kShape.head_dim,
                                                   .tokens_per_block = kTokensPerBlock,
                                                   .dtype = ParseDtype(Dtype()).value()})
                                     ->bytes_per_block();
    cli::EmbeddedClusterOptions options;
    options.config.data_dir = dir_.path();
    options.config.coordinator.listen = {"127.0.0.1:0"};
    options.config.worker = {.num_layers = kShape.layers,
                             .num_kv_heads = kShape.kv_heads,
                             .head_dim = kShape.head_dim,
                             .tokens_per_block = kTokensPerBlock,
                             .dtype = Dtype(),
                             .pool_bytes = pool_blocks * block_bytes,
                             .free_memory_fraction = 1.0};
    options.config.store = {.host_cache_bytes = 1 << 20, .disk_bytes = 0};
    options.registry = &registry_;
    cluster_ = cli::EmbeddedCluster::Create(std::move(options)).value();
    client_ = client::Client::Connect({.address = cluster_->endpoints()[0], .token = "auth is off"})
                  .value();
    engine_ =
        TinyEngine::Create(
            {.client = client_.get(), .model = &model_, .prefill_chunk_tokens = ChunkTokens()})
            .value();
  }

  // The model's answer without any cache: greedy decoding by full recomputation.
  Generation Reference(const std::vector<uint32_t>& prompt, uint32_t new_tokens) const {
    Generation out;
    std::vector<uint32_t> tokens = prompt;
    for (uint32_t i = 0; i <= new_tokens; ++i) {
      const Vec last = model_.Recompute(tokens).back();
      out.hidden.push_back(last);
      if (i < new_tokens) tokens.push_back(out.tokens.emplace_back(model_.NextToken(last)));
    }
    return out;
  }

  // int4 keeps 15 levels a head's values (8 dims here): its error moves this random
  // model's greedy choice among near ties, so from the second step on the two decode
  // different texts, and only the prompt's step is compared.
  // `prompt_only`: the same for a dtype whose error moves this run's greedy choice.
  void ExpectSame(const Generation& engine, const Generation& reference,
                  bool prompt_only = Dtype() == "int4") {
    ASSERT_EQ(engine.hidden.size(), reference.hidden.size());
    const size_t steps = prompt_only ? 1 : engine.hidden.size();
    if (steps == engine.hidden.size()) {
      EXPECT_EQ(engine.tokens, reference.tokens);
    }
    for (size_t t = 0; t < steps; ++t) {
      for (uint32_t i = 0; i < kShape.model; ++i) {
        ASSERT_NEAR(engine.hidden[t][i], reference.hidden[t][i], Tolerance(Dtype()))
            << Dtype() << " step " << t << " dim " << i;
      }
    }
  }

  // ChunkedAttention calls per layer for `computed` prompt tokens.
  static uint32_t Chunks(uint32_t computed) {
    return (computed + ChunkTokens() - 1) / ChunkTokens();
  }

  static std::vector<uint32_t> Prompt(uint32_t first, uint32_t length) {
    std::vector<uint32_t> p(length);
    std::iota(p.begin(), p.end(), first);
    return p;
  }

  const TinyModel model_{kShape, /*seed=*/42};
  testing::TempDir dir_;
  MetricsRegistry registry_;
  std::unique_ptr<cli::EmbeddedCluster> cluster_;
  std::unique_ptr<client::Client> client_;
  std::unique_ptr<TinyEngine> engine_;
};

TEST_P(TinyEngineTest, CachedPrefixesGiveTheSameOutputAsRecomputation) {
  Start(/*pool_blocks=*/64);
  // Cold: a 21-token prompt (5 full blocks and one token), 6 tokens decoded.
  const std::vector<uint32_t> first = Prompt(3, 21);
  auto cold = engine_->Generate(1, first, 6);
  ASSERT_TRUE(cold.ok()) << cold.status();
  EXPECT_EQ(cold->cached_tokens, 0u);
  EXPECT_EQ(cold->computed_tokens, 21u);
  EXPECT_EQ(cold->prefill_chunks, Chunks(21));
  ExpectSame(*cold, Reference(first, 6));

  // Warm: the same first 16 tokens (blocks 0-3), another tail: 16 tokens come from the
  // pool, 7 are computed.
  std::vector<uint32_t> second = Prompt(3, 16);
  for (uint32_t t : {50u, 51u, 52u, 53u, 54u, 55u, 56u}) second.push_back(t);
  auto warm = engine_->Generate(2, second, 6);
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(warm->cached_tokens, 16u);
  EXPECT_EQ(warm->computed_tokens, 7u);
  EXPECT_EQ(warm->prefill_chunks, Chunks(7));
  ExpectSame(*warm, Reference(second, 6));
}

TEST_P(TinyEngineTest, APartlyMatchingBlockIsReusedAndTheChunkStartsInside) {
  Start(/*pool_blocks=*/64);
  const std::vector<uint32_t> first = Prompt(3, 21);
  ASSERT_TRUE(engine_->Generate(1, first, 2).ok());
  // The same 18 leading tokens: blocks 0-3 and two tokens of block 4, copied from the
  // cached block 4; the prefill starts at position 18, inside a block.
  std::vector<uint32_t> second = Prompt(3, 18);
  for (uint32_t t : {40u, 41u, 42u, 43u, 44u}) second.push_back(t);
  auto partial = engine_->Generate(2, second, 4);
  ASSERT_TRUE(partial.ok()) << partial.status();
  EXPECT_EQ(partial->cached_tokens, 18u);
  EXPECT_EQ(partial->computed_tokens, 5u);
  EXPECT_EQ(partial->prefill_chunks, Chunks(5));
  ExpectSame(*partial, Reference(second, 4));
}

TEST_P(TinyEngineTest, AChunkOfNoTokensIsRefused) {
  Start(/*pool_blocks=*/8);
  auto engine =
      TinyEngine::Create({.client = client_.get(), .model = &model_, .prefill_chunk_tokens = 0});
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
}

TEST_P(TinyEngineTest, TheNextTurnReusesTheAnswerToo) {
  Start(/*pool_blocks=*/64);
  // Turn 1: 10 prompt tokens and 6 answered; the prompt alone fills two full blocks.
  std::vector<uint32_t> conversation = Prompt(1, 10);
  auto turn1 = engine_->Generate(1, conversation, 6);
  ASSERT_TRUE(turn1.ok()) << turn1.status();
  // Turn 2 = turn 1's prompt + its answer + 5 new tokens: the 16 tokens of turn 1 are 4
  // full blocks, all cached (the answer's two were committed after decoding).
  conversation.insert(conversation.end(), turn1->tokens.begin(), turn1->tokens.end());
  for (uint32_t t : {60u, 61u, 62u, 63u, 0u}) conversation.push_back(t);
  auto turn2 = engine_->Generate(2, conversation, 3);
  ASSERT_TRUE(turn2.ok()) << turn2.status();
  EXPECT_EQ(turn2->cached_tokens, 16u);
  ExpectSame(*turn2, Reference(conversation, 3));
}

TEST_P(TinyEngineTest, BlocksThatWentToTheHostTierComeBackExact) {
  // A pool of 8 blocks: a second, unrelated prompt pushes the first one's blocks out to
  // the host tier; the first prompt then runs again from onboarded blocks.
  Start(/*pool_blocks=*/8);
  const std::vector<uint32_t> prompt = Prompt(7, 20);  // 5 blocks
  auto first = engine_->Generate(1, prompt, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(engine_->Generate(2, Prompt(30, 28), 2).ok());  // 7 blocks + decode: evicts
  auto again = engine_->Generate(3, prompt, 4);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_GT(again->onboarded_blocks, 0u) << "the prompt's blocks came back from the host tier";
  EXPECT_GT(again->cached_tokens, 0u);
  ExpectSame(*again, Reference(prompt, 4));
}

// A sink-window sequence (seed 000): 4 sink tokens and an 8-token window in a static
// sequence of 3 blocks, a 21-token prompt and 6 more tokens one step at a time, equal to
// recomputation with StreamingLLM's attention (sinks plus the last window); its blocks
// never move, and it leaves nothing cached.
TEST_P(TinyEngineTest, ASinkWindowSequenceAttendsToItsSinksAndTheLastWindow) {
  Start(/*pool_blocks=*/16);
  const std::vector<uint32_t> prompt = Prompt(5, 21);
  auto streamed = engine_->GenerateStreaming(1, prompt, 6, /*sink_tokens=*/4, /*window_tokens=*/8);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  Generation reference;
  std::vector<uint32_t> tokens = prompt;
  for (uint32_t i = 0; i <= 6; ++i) {
    const Vec last = model_.Recompute(tokens, 4, 8).back();
    reference.hidden.push_back(last);
    if (i < 6) tokens.push_back(reference.tokens.emplace_back(model_.NextToken(last)));
  }
  // 27 steps through one ring: fp8's rounding too moves a near tie of the greedy choice.
  ExpectSame(*streamed, reference, Dtype() == "int4" || Dtype() == "fp8_e4m3");
  // Not full attention: the same prompt recomputed without the window differs.
  const Vec full = model_.Recompute(prompt).back();
  float differs = 0;
  for (uint32_t i = 0; i < kShape.model; ++i)
    differs = std::max(differs, std::fabs(full[i] - reference.hidden[0][i]));
  EXPECT_GT(differs, 0.1f);
  auto stats = client_->GetWorkerStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->used_blocks, 0u) << "freed";
  EXPECT_EQ(stats->cached_blocks, 0u) << "a rolled ring is no prefix: nothing committed";
}

// The same ring fed chunks of 4 (a streaming model's input): 4 sinks and an 8-token window,
// 7 chunks, so the ring rolls four times; each chunk attends through ChunkedAttention over
// the ring's blocks in logical order. Every token equals recomputation with the chunk's
// window (seed 000); a ring that is not whole blocks is refused by name.
TEST_P(TinyEngineTest, ASinkWindowRingTakesWholeChunksThroughChunkedAttention) {
  Start(/*pool_blocks=*/16);
  const std::vector<uint32_t> tokens = Prompt(9, 28);
  auto streamed = engine_->StreamChunks(1, tokens, /*sink_tokens=*/4, /*window_tokens=*/8,
                                        /*chunk_tokens=*/4);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  const std::vector<Vec> reference = model_.Recompute(tokens, 4, 8, 4);
  ASSERT_EQ(streamed->size(), reference.size());
  for (size_t t = 0; t < reference.size(); ++t) {
    for (uint32_t i = 0; i < kShape.model; ++i) {
      ASSERT_NEAR((*streamed)[t][i], reference[t][i], Tolerance(Dtype()))
          << Dtype() << " token " << t << " dim " << i;
    }
  }
  // The chunk's window is not the token's own: token 25 sees tokens 16-27's window less
  // its future, where one-token steps would see 18-25.
  const std::vector<Vec> per_token = model_.Recompute(tokens, 4, 8, 1);
  float differs = 0;
  for (uint32_t i = 0; i < kShape.model; ++i)
    differs = std::max(differs, std::fabs(per_token[25][i] - reference[25][i]));
  EXPECT_GT(differs, 0.01f);
  EXPECT_EQ(client_->GetWorkerStats()->used_blocks, 0u) << "freed";

  auto unaligned = engine_->StreamChunks(2, Prompt(9, 16), 2, 10, 2);  // rolls at 12
  EXPECT_EQ(unaligned.status().code(), StatusCode::kFailedPrecondition) << unaligned.status();
  EXPECT_NE(unaligned.status().message().find("multiples of tokens_per_block"), std::string::npos);
  EXPECT_EQ(engine_->StreamChunks(3, Prompt(9, 10), 4, 8, 4).status().code(),
            StatusCode::kInvalidArgument)
      << "10 tokens are not whole chunks";
  EXPECT_EQ(client_->GetWorkerStats()->used_blocks, 0u) << "a refused stream frees its ring";
}

TEST_P(TinyEngineTest, AModelThatDoesNotFitThePoolIsRefused) {
  Start(/*pool_blocks=*/8);
  const TinyModel other(
      {.vocab = 64, .model = 32, .layers = 3, .query_heads = 4, .kv_heads = 2, .head_dim = 8}, 1);
  auto engine = TinyEngine::Create({.client = client_.get(), .model = &other});
  EXPECT_EQ(engine.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(engine.status().message().find("3 layers"), std::string::npos) << engine.status();
}

// One token at a time, chunks of 3 (crossing 4-token blocks), whole prompts; each pool dtype.
INSTANTIATE_TEST_SUITE_P(PrefillChunks, TinyEngineTest,
                         ::testing::Combine(::testing::Values(1u, 3u, 64u),
                                            ::testing::Values("fp32", "int8", "fp8_e4m3", "int4")),
                         [](const auto& info) {
                           std::string dtype = std::get<1>(info.param);
                           std::erase(dtype, '_');
                           return "Chunk" + std::to_string(std::get<0>(info.param)) + "_" + dtype;
                         });

}  // namespace
}  // namespace kvtier::examples
