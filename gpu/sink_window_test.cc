// The ring-indexed sink window cache must show exactly what a roll-by-copy cache shows
// (the BlockKVCache semantics), step by step, over random chunk sequences with rewrites.
#include "common/sink_window.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "gpu/testing/backends.h"

namespace kvtier::gpu {
namespace {

// The reference: a buffer of [sink | window] positions whose window rolls left by copying
// when a new chunk arrives in steady state. One float per token.
class RollingReference {
 public:
  RollingReference(int sink, int window, int chunk)
      : sink_(sink), window_(window), chunk_(chunk), buf_(sink + window) {}

  void Before(int c) {
    current_ = c;
    if (c == prev_) return;
    if (Steady()) {
      for (int i = 0; i < window_ - chunk_; ++i) buf_[sink_ + i] = buf_[sink_ + chunk_ + i];
    }
  }

  void Write(const std::vector<float>& chunk) {
    const int total = Total();
    int start, end;
    if (current_ == prev_ + 1) {
      start = std::min(cached_, total - chunk_);
      end = start + chunk_;
    } else {
      end = std::min(cached_, total);
      start = std::max(end - chunk_, 0);
    }
    int read_start = 0;
    if (sink_ > 0 && !OverlapsSink() && start < sink_) {  // never overwrite a sink
      read_start = chunk_ - (end - sink_);
      start = sink_;
    }
    for (int p = start; p < end; ++p) buf_[p] = chunk[read_start + (p - start)];
  }

  std::vector<float> Visible() const {
    const int end =
        current_ == prev_ + 1 ? std::min(cached_ + chunk_, Total()) : std::min(cached_, Total());
    return std::vector<float>(buf_.begin(), buf_.begin() + end);
  }

  void After() {
    if (current_ == prev_ + 1) {
      if (!Steady()) cached_ += chunk_;
      ++prev_;
    }
  }

 private:
  int Total() const { return sink_ + window_; }
  bool OverlapsSink() const { return sink_ > 0 && current_ * chunk_ < sink_; }
  bool Steady() const { return cached_ == Total() && !OverlapsSink(); }

  int sink_, window_, chunk_;
  std::vector<float> buf_;
  int cached_ = 0, prev_ = -1, current_ = -1;
};

struct Shape {
  uint32_t sink, window, chunk;
};

TEST(SinkWindowTest, RingShowsWhatRollingShowsOverRandomChunkSequences) {
  const std::vector<Shape> shapes = {{0, 8, 2}, {4, 4, 4},  {3, 5, 4}, {3, 1, 2},
                                     {2, 6, 8}, {1, 15, 4}, {0, 3, 3}};
  std::mt19937 rng(42);
  for (const Shape& shape : shapes) {
    const uint32_t total = shape.sink + shape.window;
    std::vector<uint32_t> table;
    for (uint32_t b = 0; b < (total + 3) / 4; ++b)
      table.push_back(7 - b);  // slots in reversed blocks
    auto ring = SinkWindowCache::Create({shape.sink, shape.window, shape.chunk, 4, table});
    ASSERT_TRUE(ring.ok()) << ring.status().ToString();
    RollingReference reference(shape.sink, shape.window, shape.chunk);
    std::vector<float> pool(8 * 4, -1.0f);  // slot -> token value
    int64_t last = -1;
    for (int step = 0; step < 60; ++step) {
      const bool rewrite = last >= 0 && rng() % 3 == 0;
      const int64_t c = rewrite ? last : last + 1;
      std::vector<float> chunk(shape.chunk);
      for (uint32_t j = 0; j < shape.chunk; ++j)
        chunk[j] = static_cast<float>(c * 1000 + j + step * 100000);
      reference.Before(static_cast<int>(c));
      reference.Write(chunk);
      auto slots = ring->BeginChunk(c);
      ASSERT_TRUE(slots.ok()) << slots.status().ToString();
      for (uint32_t j = 0; j < shape.chunk; ++j) {
        if ((*slots)[j] >= 0) pool[(*slots)[j]] = chunk[j];
      }
      std::vector<float> visible;
      for (int64_t slot : ring->VisibleSlots()) visible.push_back(pool[slot]);
      ASSERT_EQ(visible, reference.Visible())
          << "sink " << shape.sink << " window " << shape.window << " chunk " << shape.chunk
          << " step " << step << " chunk index " << c;
      reference.After();
      ASSERT_TRUE(ring->EndChunk(c).ok());
      last = std::max(last, c);
    }
    EXPECT_TRUE(ring->steady_state());
  }
}

TEST(SinkWindowTest, OutOfOrderChunksAndBadShapesAreRefused) {
  EXPECT_EQ(SinkWindowCache::Create({2, 5, 2, 4, {0, 1}}).status().code(),
            StatusCode::kInvalidArgument);  // 7 % 2
  EXPECT_EQ(SinkWindowCache::Create({2, 6, 2, 4, {0}}).status().code(),
            StatusCode::kInvalidArgument);  // table
  auto cache = SinkWindowCache::Create({2, 6, 2, 4, {0, 1}}).value();
  EXPECT_EQ(cache.BeginChunk(0).status().code(), StatusCode::kOk);
  EXPECT_EQ(cache.BeginChunk(1).status().code(),
            StatusCode::kFailedPrecondition);  // chunk 0 still open
  EXPECT_EQ(cache.EndChunk(1).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(cache.EndChunk(0).ok());
  const Status skip = cache.BeginChunk(2).status();
  EXPECT_EQ(skip.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(skip.message().find("must be 1 (the next) or 0 (a rewrite)"), std::string::npos)
      << skip.message();
  EXPECT_EQ(cache.VisibleSlots().size(), 2u) << "the refused chunk changed nothing";
}

// The plans drive the real paged update kernel: a 4-token sink and 8-token window of a
// 2-head layer in pool blocks, filled chunk by chunk well into steady state.
// 4 sinks, an 8-token window, chunks of 4, blocks of 4 (pool blocks 10, 11, 12): the
// ring's logical order is whole blocks, rotated as it rolls.
TEST(SinkWindowTest, AWholeBlockRingIsABlockTableInLogicalOrder) {
  auto cache = SinkWindowCache::Create({.sink_tokens = 4,
                                        .window_tokens = 8,
                                        .chunk_tokens = 4,
                                        .tokens_per_block = 4,
                                        .block_table = {10, 11, 12}})
                   .value();
  const std::vector<std::vector<uint32_t>> expected = {
      {10}, {10, 11}, {10, 11, 12}, {10, 12, 11}, {10, 11, 12}};
  for (int64_t k = 0; k < 5; ++k) {
    ASSERT_TRUE(cache.BeginChunk(k).ok());
    EXPECT_EQ(cache.VisibleBlockTable().value(), expected[k]) << "chunk " << k;
    ASSERT_TRUE(cache.EndChunk(k).ok());
  }
  ASSERT_TRUE(cache.BeginChunk(4).ok());  // a rewrite keeps the order
  EXPECT_EQ(cache.VisibleBlockTable().value(), expected[4]);

  auto odd = SinkWindowCache::Create({.sink_tokens = 2,
                                      .window_tokens = 10,
                                      .chunk_tokens = 2,
                                      .tokens_per_block = 4,
                                      .block_table = {10, 11, 12}})
                 .value();
  for (int64_t k = 0; k < 7; ++k) {
    ASSERT_TRUE(odd.BeginChunk(k).ok());
    const Result<std::vector<uint32_t>> table = odd.VisibleBlockTable();
    EXPECT_EQ(table.ok(), k < 6) << "chunk " << k << ": the ring rolls at token 12";
    if (!table.ok()) {
      EXPECT_EQ(table.status().code(), StatusCode::kFailedPrecondition);
    }
    ASSERT_TRUE(odd.EndChunk(k).ok());
  }
}

TEST(SinkWindowTest, PlansDriveThePagedUpdateKernel) {
  const KvLayout layout = KvLayout::Create({.num_layers = 1,
                                            .num_kv_heads = 2,
                                            .head_dim = 4,
                                            .tokens_per_block = 4,
                                            .dtype = KvDtype::kFp32})
                              .value();
  for (auto& backend : testing::TestBackends()) {
    auto cache = SinkWindowCache::Create({4, 8, 4, 4, {5, 1, 3}}).value();
    DeviceBuffer pool =
        testing::Upload(*backend, std::vector<float>(6 * layout.bytes_per_block() / 4, 0.0f));
    for (int64_t c = 0; c < 7; ++c) {
      std::vector<float> update;  // token t, head h, element d = t * 10 + h + d / 10
      for (uint32_t j = 0; j < 4; ++j)
        for (uint32_t h = 0; h < 2; ++h)
          for (uint32_t d = 0; d < 4; ++d)
            update.push_back(static_cast<float>((c * 4 + j) * 10 + h) + d / 10.0f);
      const std::vector<int64_t> slots = cache.BeginChunk(c).value();
      DeviceBuffer u = testing::Upload(*backend, update), s = testing::Upload(*backend, slots);
      ASSERT_TRUE(backend
                      ->UpdatePaged(
                          {pool.data(), 6, &layout, 0, KvPart::kKey, u.data(), s.as<int64_t>(), 4})
                      .ok());
      ASSERT_TRUE(cache.EndChunk(c).ok());
    }
    // 28 tokens seen: visible are tokens 0-3 (sinks) and 20-27 (the window), in order.
    const std::vector<float> pool_host =
        testing::Download<float>(*backend, pool, 6 * layout.bytes_per_block() / 4);
    std::vector<int> tokens;
    for (int64_t slot : cache.VisibleSlots()) {
      const size_t offset =
          slot / 4 * layout.bytes_per_block() + layout.ByteOffset(0, KvPart::kKey, 1, slot % 4);
      tokens.push_back(static_cast<int>(pool_host[offset / 4]) / 10);  // head 1, element 0
      EXPECT_EQ(static_cast<int>(pool_host[offset / 4]) % 10, 1);
    }
    EXPECT_EQ(tokens, (std::vector<int>{0, 1, 2, 3, 20, 21, 22, 23, 24, 25, 26, 27}))
        << backend->name();
  }
}

}  // namespace
}  // namespace kvtier::gpu
