// Paged decode attention: a tiny random transformer (2 layers, 4 query heads over 2 KV
// heads) decodes through the paged cache and must equal full recomputation, the proof
// that the block layout, the paged update and the attention kernel agree.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu/testing/backends.h"

namespace kvtier::gpu {
namespace {

using testing::Download;
using testing::RandomFloats;
using testing::TestBackends;
using testing::Upload;

constexpr uint32_t kModel = 32, kQueryHeads = 4, kKvHeads = 2, kHeadDim = 8, kLayers = 2,
                   kTokensPerBlock = 4;
using Vec = std::vector<float>;

struct Layer {
  Vec wq, wk, wv, wo;  // [in][out], row-major
};

Vec MatVec(const Vec& x, const Vec& w, uint32_t out) {
  Vec y(out, 0.0f);
  for (size_t i = 0; i < x.size(); ++i)
    for (uint32_t o = 0; o < out; ++o) y[o] += x[i] * w[i * out + o];
  return y;
}

std::vector<Layer> RandomModel() {
  std::vector<Layer> layers;
  for (uint32_t l = 0; l < kLayers; ++l) {
    layers.push_back({RandomFloats(kModel * kQueryHeads * kHeadDim, 100 + l, -0.3f, 0.3f),
                      RandomFloats(kModel * kKvHeads * kHeadDim, 200 + l, -0.3f, 0.3f),
                      RandomFloats(kModel * kKvHeads * kHeadDim, 300 + l, -0.3f, 0.3f),
                      RandomFloats(kQueryHeads * kHeadDim * kModel, 400 + l, -0.3f, 0.3f)});
  }
  return layers;
}

// Full recomputation: every token attends to itself and all earlier tokens. Also returns
// each layer's keys and values, what a prefill would have written to the cache.
struct Forward {
  std::vector<Vec> hidden;             // [token][model], after the last layer
  std::vector<std::vector<Vec>> k, v;  // [layer][token][kv_heads * head_dim]
};

Forward Recompute(const std::vector<Layer>& layers, std::vector<Vec> h) {
  Forward f;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  for (const Layer& layer : layers) {
    std::vector<Vec> q, k, v;
    for (const Vec& x : h) {
      q.push_back(MatVec(x, layer.wq, kQueryHeads * kHeadDim));
      k.push_back(MatVec(x, layer.wk, kKvHeads * kHeadDim));
      v.push_back(MatVec(x, layer.wv, kKvHeads * kHeadDim));
    }
    std::vector<Vec> next = h;
    for (size_t t = 0; t < h.size(); ++t) {
      Vec attended(kQueryHeads * kHeadDim, 0.0f);
      for (uint32_t qh = 0; qh < kQueryHeads; ++qh) {
        const uint32_t kv = qh / (kQueryHeads / kKvHeads);
        Vec scores(t + 1);
        float max_score = -INFINITY, sum = 0;
        for (size_t s = 0; s <= t; ++s) {
          float dot = 0;
          for (uint32_t d = 0; d < kHeadDim; ++d)
            dot += q[t][qh * kHeadDim + d] * k[s][kv * kHeadDim + d];
          scores[s] = dot * scale;
          max_score = std::max(max_score, scores[s]);
        }
        for (size_t s = 0; s <= t; ++s) sum += scores[s] = std::exp(scores[s] - max_score);
        for (size_t s = 0; s <= t; ++s)
          for (uint32_t d = 0; d < kHeadDim; ++d)
            attended[qh * kHeadDim + d] += scores[s] / sum * v[s][kv * kHeadDim + d];
      }
      const Vec projected = MatVec(attended, layer.wo, kModel);
      for (uint32_t i = 0; i < kModel; ++i) next[t][i] += projected[i];
    }
    f.k.push_back(k);
    f.v.push_back(v);
    h = next;
  }
  f.hidden = h;
  return f;
}

TEST(DecodeAttentionTest, DecodingThroughThePagedCacheEqualsRecomputation) {
  const std::vector<Layer> layers = RandomModel();
  const uint32_t prompt = 21, decoded = 3, total = prompt + decoded;  // 24 tokens: 6 blocks of 4
  std::vector<Vec> tokens;
  for (uint32_t t = 0; t < total; ++t) tokens.push_back(RandomFloats(kModel, 1000 + t));
  const Forward reference = Recompute(layers, tokens);
  const Forward prefill =
      Recompute(layers, std::vector<Vec>(tokens.begin(), tokens.begin() + prompt));

  const KvLayout layout = KvLayout::Create({.num_layers = kLayers,
                                            .num_kv_heads = kKvHeads,
                                            .head_dim = kHeadDim,
                                            .tokens_per_block = kTokensPerBlock,
                                            .dtype = KvDtype::kFp32})
                              .value();
  const size_t pool_blocks = 16;
  const std::vector<uint32_t> table = {9, 2, 14, 0, 7, 11};  // scattered on purpose
  auto slot = [&](uint32_t t) {
    return int64_t{table[t / kTokensPerBlock]} * kTokensPerBlock + t % kTokensPerBlock;
  };

  for (auto& backend : TestBackends()) {
    DeviceBuffer pool =
        Upload(*backend, std::vector<uint8_t>(pool_blocks * layout.bytes_per_block(), 0));
    DeviceBuffer table_buf = Upload(*backend, table);
    auto write = [&](uint32_t layer, KvPart part, const std::vector<Vec>& rows,
                     uint32_t first_token) {
      Vec flat;
      std::vector<int64_t> slots;
      for (size_t i = 0; i < rows.size(); ++i) {
        flat.insert(flat.end(), rows[i].begin(), rows[i].end());
        slots.push_back(slot(first_token + static_cast<uint32_t>(i)));
      }
      DeviceBuffer u = Upload(*backend, flat), s = Upload(*backend, slots);
      ASSERT_TRUE(backend
                      ->UpdatePaged({pool.data(), pool_blocks, &layout, layer, part, u.data(),
                                     s.as<int64_t>(), static_cast<uint32_t>(rows.size())})
                      .ok());
    };
    // Prefill: the prompt's keys and values of every layer go to the cache in one call each.
    for (uint32_t l = 0; l < kLayers; ++l) {
      write(l, KvPart::kKey, prefill.k[l], 0);
      write(l, KvPart::kValue, prefill.v[l], 0);
    }
    // Decode the remaining tokens one at a time through the cache.
    for (uint32_t t = prompt; t < total; ++t) {
      Vec h = tokens[t];
      for (uint32_t l = 0; l < kLayers; ++l) {
        write(l, KvPart::kKey, {MatVec(h, layers[l].wk, kKvHeads * kHeadDim)}, t);
        write(l, KvPart::kValue, {MatVec(h, layers[l].wv, kKvHeads * kHeadDim)}, t);
        DeviceBuffer q = Upload(*backend, MatVec(h, layers[l].wq, kQueryHeads * kHeadDim));
        DeviceBuffer length = Upload(*backend, std::vector<uint32_t>{t + 1});
        DeviceBuffer out = Upload(*backend, Vec(kQueryHeads * kHeadDim));
        DecodeAttentionArgs args{pool.data(),
                                 pool_blocks,
                                 &layout,
                                 l,
                                 1,
                                 kQueryHeads,
                                 q.as<float>(),
                                 table_buf.as<uint32_t>(),
                                 static_cast<uint32_t>(table.size()),
                                 length.as<uint32_t>(),
                                 1.0f / std::sqrt(static_cast<float>(kHeadDim)),
                                 out.as<float>()};
        ASSERT_TRUE(backend->DecodeAttention(args).ok()) << backend->name();
        const Vec projected =
            MatVec(Download<float>(*backend, out, kQueryHeads * kHeadDim), layers[l].wo, kModel);
        for (uint32_t i = 0; i < kModel; ++i) h[i] += projected[i];
      }
      for (uint32_t i = 0; i < kModel; ++i) {
        ASSERT_NEAR(h[i], reference.hidden[t][i], 1e-5f)
            << backend->name() << " token " << t << " dim " << i;
      }
    }
  }
}

TEST(DecodeAttentionTest, BadLengthsAndTablesAreRejected) {
  const KvLayout layout = KvLayout::Create({.num_layers = 1,
                                            .num_kv_heads = 1,
                                            .head_dim = 8,
                                            .tokens_per_block = 4,
                                            .dtype = KvDtype::kFp16})
                              .value();
  for (auto& backend : TestBackends()) {
    DeviceBuffer pool = Upload(*backend, std::vector<uint8_t>(2 * layout.bytes_per_block()));
    DeviceBuffer q = Upload(*backend, Vec(8)), out = Upload(*backend, Vec(8, -1.0f));
    DeviceBuffer table =
        Upload(*backend, std::vector<uint32_t>{1, 5});  // 5: not a block of this pool
    DeviceBuffer ok_length = Upload(*backend, std::vector<uint32_t>{4});
    DecodeAttentionArgs args{pool.data(),
                             2,
                             &layout,
                             0,
                             1,
                             1,
                             q.as<float>(),
                             table.as<uint32_t>(),
                             2,
                             ok_length.as<uint32_t>(),
                             0.35f,
                             out.as<float>()};
    EXPECT_TRUE(backend->DecodeAttention(args).ok()) << "only the first entry is used for 4 tokens";
    DeviceBuffer long_length = Upload(*backend, std::vector<uint32_t>{5});
    args.context_lengths = long_length.as<uint32_t>();
    Status status = backend->DecodeAttention(args);
    EXPECT_EQ(status.code(), StatusCode::kOutOfRange) << backend->name();
    EXPECT_NE(status.message().find("block_tables[0][1] = 5"), std::string::npos)
        << status.message();
    DeviceBuffer zero_length = Upload(*backend, std::vector<uint32_t>{0});
    args.context_lengths = zero_length.as<uint32_t>();
    EXPECT_EQ(backend->DecodeAttention(args).code(), StatusCode::kOutOfRange) << backend->name();
    // Three query heads with the same query read the one KV head: three equal outputs.
    const Vec one_query = RandomFloats(8, 5);
    Vec three_queries;
    for (int h = 0; h < 3; ++h)
      three_queries.insert(three_queries.end(), one_query.begin(), one_query.end());
    DeviceBuffer q3 = Upload(*backend, three_queries), out3 = Upload(*backend, Vec(24, -1.0f));
    args.num_query_heads = 3;
    args.query = q3.as<float>();
    args.output = out3.as<float>();
    args.context_lengths = ok_length.as<uint32_t>();
    ASSERT_TRUE(backend->DecodeAttention(args).ok()) << "3 query heads share the one KV head";
    const Vec heads = Download<float>(*backend, out3, 24);
    for (int d = 0; d < 8; ++d) {
      EXPECT_EQ(heads[d], heads[8 + d]) << backend->name() << " dim " << d;
      EXPECT_EQ(heads[d], heads[16 + d]) << backend->name() << " dim " << d;
    }
  }
}

}  // namespace
}  // namespace kvtier::gpu
