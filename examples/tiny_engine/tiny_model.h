// TinyModel: a transformer small enough to check by hand: random weights, token
// embeddings, `layers` blocks of multi-head attention (GQA: query heads share KV heads)
// with residual connections, and a greedy next-token head. Recompute() runs it over a
// whole sequence with no cache at all: the reference the cached engine must equal.
//
// Thread safety: immutable after construction.
#pragma once

#include <cstdint>
#include <vector>

namespace kvtier::examples {

using Vec = std::vector<float>;

struct TinyModelShape {
  uint32_t vocab = 64;
  uint32_t model = 32;
  uint32_t layers = 2;
  uint32_t query_heads = 4;
  uint32_t kv_heads = 2;
  uint32_t head_dim = 8;
};

class TinyModel {
 public:
  TinyModel(const TinyModelShape& shape, uint64_t seed);

  const TinyModelShape& shape() const { return shape_; }
  Vec Embed(uint32_t token) const;
  // Projections of one layer for one token's hidden state.
  Vec Query(uint32_t layer, const Vec& h) const;
  Vec Key(uint32_t layer, const Vec& h) const;
  Vec Value(uint32_t layer, const Vec& h) const;
  Vec Output(uint32_t layer, const Vec& attended) const;  // back to the model width
  uint32_t NextToken(const Vec& h) const;                 // greedy

  // Every token's final hidden state, each token attending to itself and all before it;
  // with `window_tokens`, only to the first `sink_tokens` tokens and the last
  // `window_tokens` up to itself (StreamingLLM's attention). With chunks of
  // `chunk_tokens`, the window is that of the token's chunk (the last `window_tokens` up
  // to the chunk's end, seed 000's cache), and it attends within it causally.
  std::vector<Vec> Recompute(const std::vector<uint32_t>& tokens, uint32_t sink_tokens = 0,
                             uint32_t window_tokens = 0, uint32_t chunk_tokens = 1) const;

 private:
  struct Layer {
    Vec wq, wk, wv, wo;  // [in][out], row-major
  };
  TinyModelShape shape_;
  Vec embedding_, unembedding_;  // [vocab][model], [model][vocab]
  std::vector<Layer> layers_;
};

}  // namespace kvtier::examples
