// Chunked prefill attention: chunks of query tokens of several sequences at once, each at
// its offset in a paged context (a cold prefill, chunks after a cached prefix that do not
// start or end on a block boundary, a single decode token), against dense causal attention
// computed here, for every float pool dtype, on each backend; a chunk of one equals
// DecodeAttention; and bad starts, contexts and tables are refused with nothing written.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu/numeric.h"
#include "gpu/testing/backends.h"

namespace kvtier::gpu {
namespace {

using testing::Download;
using testing::RandomFloats;
using testing::TestBackends;
using testing::Upload;
using Vec = std::vector<float>;

constexpr uint32_t kQueryHeads = 4, kKvHeads = 2, kHeadDim = 8, kTokensPerBlock = 4;
constexpr uint32_t kPoolBlocks = 32, kMaxBlocks = 8;

KvLayout Layout(KvDtype dtype, uint32_t layers = 2) {
  return KvLayout::Create({.num_layers = layers,
                           .num_kv_heads = kKvHeads,
                           .head_dim = kHeadDim,
                           .tokens_per_block = kTokensPerBlock,
                           .dtype = dtype})
      .value();
}

// One sequence: its context's keys and values (as the pool stores them: rounded to the
// dtype) and its chunk, the context's last `chunk` tokens.
struct Sequence {
  uint32_t context = 0, chunk = 0;
  std::vector<uint32_t> table;  // kMaxBlocks entries
  Vec keys, values;             // [context][kv_heads][head_dim]
};

// Rounds values to what a pool of `dtype` holds.
Vec Rounded(const Vec& values, KvDtype dtype) {
  std::vector<uint8_t> bytes(values.size() * 4);
  Vec out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    StoreFloat(bytes.data(), dtype, i, values[i]);
    out[i] = LoadFloat(bytes.data(), dtype, i);
  }
  return out;
}

// Dense causal attention: query token i of s's chunk sees positions <= context - chunk + i;
// with a window, of those only the first `sinks` and the last `window`.
Vec Reference(const std::vector<Sequence>& sequences, const Vec& query, float scale,
              uint32_t window = 0, uint32_t sinks = 0) {
  Vec out;
  size_t token = 0;
  for (const Sequence& s : sequences) {
    for (uint32_t i = 0; i < s.chunk; ++i, ++token) {
      const uint32_t visible = s.context - s.chunk + i + 1;
      for (uint32_t qh = 0; qh < kQueryHeads; ++qh) {
        const uint32_t kv = qh / (kQueryHeads / kKvHeads);
        const float* q = &query[(token * kQueryHeads + qh) * kHeadDim];
        Vec scores(visible);
        float max_score = -INFINITY, sum = 0;
        for (uint32_t t = 0; t < visible; ++t) {
          float dot = 0;
          for (uint32_t d = 0; d < kHeadDim; ++d)
            dot += q[d] * s.keys[(t * kKvHeads + kv) * kHeadDim + d];
          const bool seen = window == 0 || t < sinks || t + window >= visible;
          max_score = std::max(max_score, scores[t] = seen ? dot * scale : -INFINITY);
        }
        for (float& x : scores) sum += x = std::exp(x - max_score);
        for (uint32_t d = 0; d < kHeadDim; ++d) {
          float acc = 0;
          for (uint32_t t = 0; t < visible; ++t)
            acc += scores[t] / sum * s.values[(t * kKvHeads + kv) * kHeadDim + d];
          out.push_back(acc);
        }
      }
    }
  }
  return out;
}

// Three sequences: a cold prefill of 7 tokens; a chunk of 6 after a cached prefix of 9
// (positions 9-14: neither end on a block boundary); one decode token at position 20.
std::vector<Sequence> MakeSequences(KvDtype dtype) {
  std::vector<Sequence> sequences = {{7, 7, {}, {}, {}}, {15, 6, {}, {}, {}}, {21, 1, {}, {}, {}}};
  uint32_t next_block = 31;
  for (size_t i = 0; i < sequences.size(); ++i) {
    Sequence& s = sequences[i];
    for (uint32_t e = 0; e < kMaxBlocks; ++e) s.table.push_back(next_block-- % kPoolBlocks);
    const size_t n = size_t{s.context} * kKvHeads * kHeadDim;
    s.keys = Rounded(RandomFloats(n, 10 + static_cast<uint32_t>(i)), dtype);
    s.values = Rounded(RandomFloats(n, 20 + static_cast<uint32_t>(i)), dtype);
  }
  return sequences;
}

// Writes every sequence's keys and values of `layer` into the pool with UpdatePaged.
void Fill(KernelBackend& backend, const DeviceBuffer& pool, const KvLayout& layout, uint32_t layer,
          const std::vector<Sequence>& sequences) {
  for (const Sequence& s : sequences) {
    std::vector<int64_t> slots;
    for (uint32_t t = 0; t < s.context; ++t)
      slots.push_back(int64_t{s.table[t / kTokensPerBlock]} * kTokensPerBlock +
                      t % kTokensPerBlock);
    DeviceBuffer slot_buf = Upload(backend, slots);
    for (const auto& [part, rows] :
         {std::pair{KvPart::kKey, &s.keys}, std::pair{KvPart::kValue, &s.values}}) {
      std::vector<uint8_t> bytes(rows->size() * DtypeBytes(layout.dtype()));
      for (size_t i = 0; i < rows->size(); ++i)
        StoreFloat(bytes.data(), layout.dtype(), i, (*rows)[i]);
      DeviceBuffer update = Upload(backend, bytes);
      ASSERT_TRUE(backend
                      .UpdatePaged({pool.data(), kPoolBlocks, &layout, layer, part, update.data(),
                                    slot_buf.as<int64_t>(), s.context})
                      .ok());
    }
  }
}

struct Buffers {
  DeviceBuffer query, starts, tables, contexts, output;
};

Buffers Upload(KernelBackend& backend, const std::vector<Sequence>& sequences, const Vec& query,
               float fill) {
  std::vector<uint32_t> starts = {0}, tables, contexts;
  for (const Sequence& s : sequences) {
    starts.push_back(starts.back() + s.chunk);
    tables.insert(tables.end(), s.table.begin(), s.table.end());
    contexts.push_back(s.context);
  }
  return {testing::Upload(backend, query), testing::Upload(backend, starts),
          testing::Upload(backend, tables), testing::Upload(backend, contexts),
          testing::Upload(backend, Vec(query.size(), fill))};
}

ChunkedAttentionArgs Args(const DeviceBuffer& pool, const KvLayout& layout, uint32_t layer,
                          const Buffers& b, uint32_t batch, uint32_t query_tokens) {
  return {.pool = pool.data(),
          .pool_blocks = kPoolBlocks,
          .layout = &layout,
          .layer = layer,
          .batch = batch,
          .num_query_heads = kQueryHeads,
          .query_tokens = query_tokens,
          .query = b.query.as<float>(),
          .query_starts = b.starts.as<uint32_t>(),
          .block_tables = b.tables.as<uint32_t>(),
          .max_blocks_per_sequence = kMaxBlocks,
          .context_lengths = b.contexts.as<uint32_t>(),
          .scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim)),
          .output = b.output.as<float>()};
}

TEST(ChunkedAttentionTest, ChunksAtTheirOffsetsEqualDenseCausalAttention) {
  for (const KvDtype dtype : {KvDtype::kFp32, KvDtype::kFp16, KvDtype::kBf16}) {
    const KvLayout layout = Layout(dtype);
    const std::vector<Sequence> sequences = MakeSequences(dtype);
    const uint32_t query_tokens = 7 + 6 + 1;
    const Vec query = RandomFloats(size_t{query_tokens} * kQueryHeads * kHeadDim, 99);
    const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    const Vec expected = Reference(sequences, query, scale);
    for (auto& backend : TestBackends()) {
      DeviceBuffer pool =
          testing::Upload(*backend, std::vector<uint8_t>(kPoolBlocks * layout.bytes_per_block()));
      Fill(*backend, pool, layout, 1, sequences);  // layer 1: the layer offset counts
      const Buffers b = Upload(*backend, sequences, query, -7.0f);
      ASSERT_TRUE(backend->ChunkedAttention(Args(pool, layout, 1, b, 3, query_tokens)).ok())
          << backend->name() << " " << DtypeName(dtype);
      const Vec got = Download<float>(*backend, b.output, expected.size());
      for (size_t i = 0; i < expected.size(); ++i) {
        ASSERT_NEAR(got[i], expected[i], 1e-5f)
            << backend->name() << " " << DtypeName(dtype) << " element " << i << " (token "
            << i / (kQueryHeads * kHeadDim) << ")";
      }
    }
  }
}

// A windowed layer (5 tokens, 2 sinks): each query sees its sinks and its last window, and
// the table entries of blocks no query of a chunk sees are never read (they hold an id
// past the pool, as a windowed pool's kNoBlock). Decode sees what a chunk of one sees.
TEST(ChunkedAttentionTest, AWindowedLayerSeesItsSinksAndWindowAndReadsNothingElse) {
  constexpr uint32_t kWindow = 5, kSinks = 2;
  const KvLayout layout = Layout(KvDtype::kFp32);
  const std::vector<Sequence> filled = MakeSequences(KvDtype::kFp32);
  std::vector<Sequence> sequences = filled;
  size_t unread = 0;
  for (Sequence& s : sequences) {
    const uint32_t first_visible = s.context - s.chunk + 1;
    for (uint32_t e = 0; e * kTokensPerBlock < s.context; ++e) {
      const uint32_t begin = e * kTokensPerBlock;
      if (begin >= kSinks && begin + kTokensPerBlock + kWindow <= first_visible) {
        s.table[e] = UINT32_MAX;
        ++unread;
      }
    }
  }
  ASSERT_EQ(unread, 3u) << "blocks 1, 2 of the chunk at 9; blocks 1-3 of the decode at 20";
  const uint32_t query_tokens = 7 + 6 + 1;
  const Vec query = RandomFloats(size_t{query_tokens} * kQueryHeads * kHeadDim, 5);
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  const Vec expected = Reference(sequences, query, scale, kWindow, kSinks);
  ASSERT_GT(std::fabs(expected.back() - Reference(sequences, query, scale).back()), 1e-4f)
      << "the window changes the answer";
  for (auto& backend : TestBackends()) {
    DeviceBuffer pool =
        testing::Upload(*backend, std::vector<uint8_t>(kPoolBlocks * layout.bytes_per_block()));
    Fill(*backend, pool, layout, 0, filled);
    const Buffers b = Upload(*backend, sequences, query, -7.0f);
    ChunkedAttentionArgs args = Args(pool, layout, 0, b, 3, query_tokens);
    args.window_tokens = kWindow;
    args.sink_tokens = kSinks;
    ASSERT_TRUE(backend->ChunkedAttention(args).ok()) << backend->name();
    const Vec got = Download<float>(*backend, b.output, expected.size());
    for (size_t i = 0; i < expected.size(); ++i)
      ASSERT_NEAR(got[i], expected[i], 1e-5f) << backend->name() << " element " << i;
    // The decode token alone (sequence 2: position 20) through DecodeAttention.
    const size_t row = size_t{kQueryHeads} * kHeadDim;
    DeviceBuffer one_query = testing::Upload(*backend, Vec(query.end() - row, query.end()));
    DeviceBuffer table = testing::Upload(*backend, sequences[2].table);
    DeviceBuffer length = testing::Upload(*backend, std::vector<uint32_t>{sequences[2].context});
    DeviceBuffer decoded = testing::Upload(*backend, Vec(row));
    DecodeAttentionArgs decode{pool.data(),
                               kPoolBlocks,
                               &layout,
                               0,
                               1,
                               kQueryHeads,
                               one_query.as<float>(),
                               table.as<uint32_t>(),
                               kMaxBlocks,
                               length.as<uint32_t>(),
                               scale,
                               decoded.as<float>()};
    decode.window_tokens = kWindow;
    decode.sink_tokens = kSinks;
    ASSERT_TRUE(backend->DecodeAttention(decode).ok()) << backend->name();
    const Vec last = Download<float>(*backend, decoded, row);
    for (size_t i = 0; i < row; ++i)
      ASSERT_NEAR(last[i], expected[expected.size() - row + i], 1e-5f) << backend->name();
    decode.window_tokens = 0;  // sinks without a window
    EXPECT_EQ(backend->DecodeAttention(decode).code(), StatusCode::kInvalidArgument);
  }
}

TEST(ChunkedAttentionTest, AChunkOfOneIsDecodeAttention) {
  const KvLayout layout = Layout(KvDtype::kFp16);
  std::vector<Sequence> sequences = MakeSequences(KvDtype::kFp16);
  for (Sequence& s : sequences) s.chunk = 1;
  const Vec query = RandomFloats(3 * kQueryHeads * kHeadDim, 7);
  for (auto& backend : TestBackends()) {
    DeviceBuffer pool =
        testing::Upload(*backend, std::vector<uint8_t>(kPoolBlocks * layout.bytes_per_block()));
    Fill(*backend, pool, layout, 0, sequences);
    const Buffers b = Upload(*backend, sequences, query, 0.0f);
    ASSERT_TRUE(backend->ChunkedAttention(Args(pool, layout, 0, b, 3, 3)).ok());
    DeviceBuffer decoded = testing::Upload(*backend, Vec(query.size()));
    ASSERT_TRUE(backend
                    ->DecodeAttention(
                        {pool.data(), kPoolBlocks, &layout, 0, 3, kQueryHeads, b.query.as<float>(),
                         b.tables.as<uint32_t>(), kMaxBlocks, b.contexts.as<uint32_t>(),
                         1.0f / std::sqrt(static_cast<float>(kHeadDim)), decoded.as<float>()})
                    .ok());
    const Vec chunked = Download<float>(*backend, b.output, query.size());
    const Vec decode = Download<float>(*backend, decoded, query.size());
    for (size_t i = 0; i < query.size(); ++i)
      ASSERT_NEAR(chunked[i], decode[i], 1e-6f) << backend->name() << " element " << i;
  }
}

TEST(ChunkedAttentionTest, BadStartsContextsAndTablesAreRefusedWithNothingWritten) {
  const KvLayout layout = Layout(KvDtype::kFp32, 1);
  const std::vector<Sequence> sequences = MakeSequences(KvDtype::kFp32);
  const Vec query = RandomFloats(14 * kQueryHeads * kHeadDim, 3);
  struct Case {
    const char* what;
    std::vector<uint32_t> starts, contexts;
    uint32_t bad_table_entry;  // kMaxBlocks: none
    const char* message;
  };
  const std::vector<Case> cases = {
      {"a first start above 0", {1, 7, 13, 14}, {7, 15, 21}, kMaxBlocks, "query_starts[0] = 1"},
      {"an empty chunk", {0, 7, 7, 14}, {7, 15, 21}, kMaxBlocks, "query_starts[2] = 7"},
      {"starts past the tokens", {0, 7, 13, 15}, {7, 15, 21}, kMaxBlocks, "query_starts[3] = 15"},
      {"starts ending short of the tokens",
       {0, 7, 12, 13},
       {7, 15, 21},
       kMaxBlocks,
       "query_starts[3] = 13"},
      {"a context shorter than its chunk",
       {0, 7, 13, 14},
       {6, 15, 21},
       kMaxBlocks,
       "context_lengths[0] = 6 must be in [7, 32]"},
      {"a context past the table",
       {0, 7, 13, 14},
       {7, 33, 21},
       kMaxBlocks,
       "context_lengths[1] = 33"},
      {"a table entry outside the pool", {0, 7, 13, 14}, {7, 15, 21}, 3, "block_tables[1][3] = 40"},
  };
  for (auto& backend : TestBackends()) {
    DeviceBuffer pool =
        testing::Upload(*backend, std::vector<uint8_t>(kPoolBlocks * layout.bytes_per_block()));
    for (const Case& c : cases) {
      Buffers b = Upload(*backend, sequences, query, -1.0f);
      b.starts = testing::Upload(*backend, c.starts);
      b.contexts = testing::Upload(*backend, c.contexts);
      if (c.bad_table_entry < kMaxBlocks) {
        std::vector<uint32_t> tables;
        for (const Sequence& s : sequences)
          tables.insert(tables.end(), s.table.begin(), s.table.end());
        tables[kMaxBlocks + c.bad_table_entry] = 40;
        b.tables = testing::Upload(*backend, tables);
      }
      const Status status = backend->ChunkedAttention(Args(pool, layout, 0, b, 3, 14));
      EXPECT_EQ(status.code(), StatusCode::kOutOfRange) << backend->name() << ": " << c.what;
      EXPECT_NE(status.message().find(c.message), std::string::npos)
          << backend->name() << ": " << c.what << ": " << status.message();
      const Vec out = Download<float>(*backend, b.output, query.size());
      EXPECT_EQ(std::count(out.begin(), out.end(), -1.0f), static_cast<long>(out.size()))
          << backend->name() << ": " << c.what << ": nothing is written";
    }
    Buffers b = Upload(*backend, sequences, query, -1.0f);
    ChunkedAttentionArgs args = Args(pool, layout, 0, b, 3, 2);
    EXPECT_EQ(backend->ChunkedAttention(args).code(), StatusCode::kInvalidArgument)
        << "2 query tokens for 3 sequences";
    args = Args(pool, layout, 0, b, 3, 14);
    args.num_query_heads = 3;
    EXPECT_EQ(backend->ChunkedAttention(args).code(), StatusCode::kInvalidArgument)
        << "3 query heads over 2 KV heads";
  }
}

}  // namespace
}  // namespace kvtier::gpu
