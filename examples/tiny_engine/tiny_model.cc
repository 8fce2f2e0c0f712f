#include "examples/tiny_engine/tiny_model.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace kvtier::examples {
namespace {

Vec Random(size_t n, std::mt19937_64& rng, float bound) {
  std::uniform_real_distribution<float> dist(-bound, bound);
  Vec v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

Vec MatVec(const Vec& x, const Vec& w, uint32_t out) {
  Vec y(out, 0.0f);
  for (size_t i = 0; i < x.size(); ++i)
    for (uint32_t o = 0; o < out; ++o) y[o] += x[i] * w[i * out + o];
  return y;
}

}  // namespace

TinyModel::TinyModel(const TinyModelShape& shape, uint64_t seed) : shape_(shape) {
  std::mt19937_64 rng(seed);
  const uint32_t q = shape.query_heads * shape.head_dim, kv = shape.kv_heads * shape.head_dim;
  embedding_ = Random(size_t{shape.vocab} * shape.model, rng, 1.0f);
  unembedding_ = Random(size_t{shape.model} * shape.vocab, rng, 0.3f);
  for (uint32_t l = 0; l < shape.layers; ++l) {
    layers_.push_back(
        {Random(size_t{shape.model} * q, rng, 0.3f), Random(size_t{shape.model} * kv, rng, 0.3f),
         Random(size_t{shape.model} * kv, rng, 0.3f), Random(size_t{q} * shape.model, rng, 0.3f)});
  }
}

Vec TinyModel::Embed(uint32_t token) const {
  const auto row =
      embedding_.begin() + static_cast<std::ptrdiff_t>(size_t{token % shape_.vocab} * shape_.model);
  return Vec(row, row + shape_.model);
}
Vec TinyModel::Query(uint32_t l, const Vec& h) const {
  return MatVec(h, layers_[l].wq, shape_.query_heads * shape_.head_dim);
}
Vec TinyModel::Key(uint32_t l, const Vec& h) const {
  return MatVec(h, layers_[l].wk, shape_.kv_heads * shape_.head_dim);
}
Vec TinyModel::Value(uint32_t l, const Vec& h) const {
  return MatVec(h, layers_[l].wv, shape_.kv_heads * shape_.head_dim);
}
Vec TinyModel::Output(uint32_t l, const Vec& attended) const {
  return MatVec(attended, layers_[l].wo, shape_.model);
}

uint32_t TinyModel::NextToken(const Vec& h) const {
  const Vec logits = MatVec(h, unembedding_, shape_.vocab);
  return static_cast<uint32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

std::vector<Vec> TinyModel::Recompute(const std::vector<uint32_t>& tokens, uint32_t sink_tokens,
                                      uint32_t window_tokens, uint32_t chunk_tokens) const {
  const auto sees = [&](size_t s, size_t t) {
    const size_t chunk_end = (t / chunk_tokens + 1) * chunk_tokens;
    return window_tokens == 0 || s < sink_tokens || s + window_tokens >= chunk_end;
  };
  const uint32_t d = shape_.head_dim, group = shape_.query_heads / shape_.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<Vec> h;
  h.reserve(tokens.size());
  for (uint32_t t : tokens) h.push_back(Embed(t));
  for (uint32_t l = 0; l < shape_.layers; ++l) {
    std::vector<Vec> q, k, v;
    for (const Vec& x : h) {
      q.push_back(Query(l, x));
      k.push_back(Key(l, x));
      v.push_back(Value(l, x));
    }
    std::vector<Vec> next = h;
    for (size_t t = 0; t < h.size(); ++t) {
      Vec attended(size_t{shape_.query_heads} * d, 0.0f);
      for (uint32_t qh = 0; qh < shape_.query_heads; ++qh) {
        const uint32_t kvh = qh / group;
        Vec scores(t + 1);
        float max_score = -INFINITY, sum = 0;
        for (size_t s = 0; s <= t; ++s) {
          float dot = 0;
          for (uint32_t i = 0; i < d; ++i) dot += q[t][qh * d + i] * k[s][kvh * d + i];
          scores[s] = sees(s, t) ? dot * scale : -INFINITY;
          max_score = std::max(max_score, scores[s]);
        }
        for (size_t s = 0; s <= t; ++s) sum += scores[s] = std::exp(scores[s] - max_score);
        for (size_t s = 0; s <= t; ++s)
          for (uint32_t i = 0; i < d; ++i)
            attended[qh * d + i] += scores[s] / sum * v[s][kvh * d + i];
      }
      const Vec projected = Output(l, attended);
      for (uint32_t i = 0; i < shape_.model; ++i) next[t][i] += projected[i];
    }
    h = std::move(next);
  }
  return h;
}

}  // namespace kvtier::examples
