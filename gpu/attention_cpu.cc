#include "gpu/attention_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gpu/attention_window.h"
#include "gpu/kernel_checks.h"
#include "gpu/numeric.h"

namespace kvtier::gpu::internal {
namespace {

// One sequence's paged keys and values of one layer.
struct PagedContext {
  const char* pool;
  const KvLayout& layout;
  uint32_t layer;
  const uint32_t* table;  // the sequence's block table

  const char* Block(uint32_t t) const {
    return pool + size_t{table[t / layout.tokens_per_block()]} * layout.bytes_per_block();
  }
  const char* Row(KvPart part, uint32_t kv_head, uint32_t t) const {
    return Block(t) + layout.ByteOffset(layer, part, kv_head, t % layout.tokens_per_block());
  }
  // Token t's head row as floats: the values, times its scale in a quantized pool.
  void Load(KvPart part, uint32_t kv_head, uint32_t t, float* out) const {
    const char* row = Row(part, kv_head, t);
    const uint32_t dim = layout.head_dim();
    if (!layout.quantized()) {
      for (uint32_t d = 0; d < dim; ++d) out[d] = LoadFloat(row, layout.dtype(), d);
      return;
    }
    float scale = 0.0f;
    std::memcpy(&scale,
                Block(t) + layout.ScaleOffset(layer, part, kv_head, t % layout.tokens_per_block()),
                sizeof(scale));
    for (uint32_t d = 0; d < dim; ++d) out[d] = LoadQuantized(row, layout.dtype(), d) * scale;
  }
};

// out = softmax(q . k[t] * scale for t < visible that `window` sees) . v, of KV head
// `kv_head`. scores: scratch.
void AttendOne(const PagedContext& c, uint32_t kv_head, const float* q, uint32_t visible,
               AttentionWindow window, float scale, float* out, std::vector<float>& scores) {
  const uint32_t dim = c.layout.head_dim();
  float row[kMaxAttentionHeadDim];
  scores.assign(visible, -INFINITY);
  float max_score = -INFINITY;
  for (uint32_t t = 0; t < visible; ++t) {
    if (!window.Sees(t, visible)) continue;
    c.Load(KvPart::kKey, kv_head, t, row);
    float dot = 0.0f;
    for (uint32_t d = 0; d < dim; ++d) dot += q[d] * row[d];
    scores[t] = dot * scale;
    max_score = std::max(max_score, scores[t]);
  }
  float sum = 0.0f;
  std::fill(out, out + dim, 0.0f);
  for (uint32_t t = 0; t < visible; ++t) {
    if (!window.Sees(t, visible)) continue;
    const float p = std::exp(scores[t] - max_score);
    sum += p;
    c.Load(KvPart::kValue, kv_head, t, row);
    for (uint32_t d = 0; d < dim; ++d) out[d] += p * row[d];
  }
  for (uint32_t d = 0; d < dim; ++d) out[d] /= sum;
}

// The block table entries a context of `length` tokens reads, for a chunk whose first
// query sees [0, first_visible) through `window`.
Status CheckTable(const char* kernel, const uint32_t* tables, uint32_t max_blocks,
                  uint32_t tokens_per_block, size_t pool_blocks, uint32_t b, uint32_t length,
                  AttentionWindow window, uint32_t first_visible) {
  for (uint32_t e = 0; e < (length + tokens_per_block - 1) / tokens_per_block; ++e) {
    if (!window.Reads(e, tokens_per_block, first_visible)) continue;
    const uint32_t id = tables[size_t{b} * max_blocks + e];
    if (id >= pool_blocks) return BadBlockTableEntry(kernel, b, e, id, pool_blocks);
  }
  return Status::Ok();
}

}  // namespace

Status DecodeAttentionOnCpu(const DecodeAttentionArgs& a) {
  KVTIER_RETURN_IF_ERROR(CheckDecodeAttention(a));
  const KvLayout& layout = *a.layout;
  const AttentionWindow window{a.window_tokens, a.sink_tokens};
  const uint32_t tpb = layout.tokens_per_block();
  const uint32_t max_tokens = a.max_blocks_per_sequence * tpb;
  for (uint32_t b = 0; b < a.batch; ++b) {
    const uint32_t length = a.context_lengths[b];
    if (length < 1 || length > max_tokens) return BadContextLength(b, length, max_tokens);
    KVTIER_RETURN_IF_ERROR(CheckTable("DecodeAttention", a.block_tables, a.max_blocks_per_sequence,
                                      tpb, a.pool_blocks, b, length, window, length));
  }
  const uint32_t dim = layout.head_dim();
  const uint32_t group = a.num_query_heads / layout.num_kv_heads();
  std::vector<float> scores;
  for (uint32_t b = 0; b < a.batch; ++b) {
    const PagedContext context{static_cast<const char*>(a.pool), layout, a.layer,
                               a.block_tables + size_t{b} * a.max_blocks_per_sequence};
    for (uint32_t qh = 0; qh < a.num_query_heads; ++qh) {
      const size_t row = (size_t{b} * a.num_query_heads + qh) * dim;
      AttendOne(context, qh / group, a.query + row, a.context_lengths[b], window, a.scale,
                a.output + row, scores);
    }
  }
  return Status::Ok();
}

Status ChunkedAttentionOnCpu(const ChunkedAttentionArgs& a) {
  KVTIER_RETURN_IF_ERROR(CheckChunkedAttention(a));
  const KvLayout& layout = *a.layout;
  const AttentionWindow window{a.window_tokens, a.sink_tokens};
  const uint32_t tpb = layout.tokens_per_block();
  const uint32_t max_tokens = a.max_blocks_per_sequence * tpb;
  if (a.query_starts[0] != 0) return BadQueryStart(0, a.query_starts[0], a.query_tokens);
  for (uint32_t b = 0; b < a.batch; ++b) {
    const uint32_t start = a.query_starts[b], end = a.query_starts[b + 1];
    if (end <= start || end > a.query_tokens) return BadQueryStart(b + 1, end, a.query_tokens);
    if (b + 1 == a.batch && end != a.query_tokens) return BadQueryStart(b + 1, end, a.query_tokens);
    const uint32_t length = a.context_lengths[b];
    if (length < end - start || length > max_tokens)
      return BadChunkContext(b, length, end - start, max_tokens);
    KVTIER_RETURN_IF_ERROR(CheckTable("ChunkedAttention", a.block_tables, a.max_blocks_per_sequence,
                                      tpb, a.pool_blocks, b, length, window,
                                      length - (end - start) + 1));
  }
  const uint32_t dim = layout.head_dim();
  const uint32_t group = a.num_query_heads / layout.num_kv_heads();
  std::vector<float> scores;
  for (uint32_t b = 0; b < a.batch; ++b) {
    const PagedContext context{static_cast<const char*>(a.pool), layout, a.layer,
                               a.block_tables + size_t{b} * a.max_blocks_per_sequence};
    const uint32_t start = a.query_starts[b], chunk = a.query_starts[b + 1] - start;
    const uint32_t first_position = a.context_lengths[b] - chunk;
    for (uint32_t i = 0; i < chunk; ++i) {
      for (uint32_t qh = 0; qh < a.num_query_heads; ++qh) {
        const size_t row = (size_t{start + i} * a.num_query_heads + qh) * dim;
        AttendOne(context, qh / group, a.query + row, first_position + i + 1, window, a.scale,
                  a.output + row, scores);
      }
    }
  }
  return Status::Ok();
}

}  // namespace kvtier::gpu::internal
