// TinyEngine: an inference worker in miniature, using kvtier the way a real engine would.
//
// For each request it computes the prompt's block keys, lets the node reuse the cached
// prefix in place (Allocate, with the prompt's tokens: a partly matching block is copied
// too) and fill what the host and disk tiers hold (Onboard), then prefills only the
// remaining tokens, in chunks of prefill_chunk_tokens: each chunk's keys and values go
// straight into the node's pool (mapped with AttachPool: shared memory, zero-copy) with
// the paged update kernel, and the chunk attends over the whole context, cached part
// included, with the chunked attention kernel (gpu/kernels.h: a causal mask offset by the
// cached prefix). It commits the prompt's blocks, decodes greedily (the paged decode
// attention kernel), and commits the answer's full blocks as well (a conversation's next
// turn starts with them). Its output equals TinyModel::Recompute, which uses no cache:
// tiny_engine_test.cc checks it for several chunk sizes, cold, warm, after a partial
// reuse and after the blocks went to the host tier and back.
//
// The pool must be in host memory (the CPU kernels read it in place); a GPU pool would be
// opened through its CUDA IPC handle and driven by the CUDA kernels instead.
//
// Thread safety: one request at a time per engine. Ownership: borrows the client and the
// model, which outlive it.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "common/kv_layout.h"
#include "common/status.h"
#include "examples/tiny_engine/tiny_model.h"
#include "gpu/kernels.h"
#include "services/client/client.h"

namespace kvtier::examples {

struct TinyEngineOptions {
  client::Client* client = nullptr;  // required
  const TinyModel* model = nullptr;  // required; its shape must match the pool's layout
  uint32_t pool_id = 0;
  // Prompt tokens run through the model at once (chunked prefill); at least 1.
  uint32_t prefill_chunk_tokens = 16;
};

struct Generation {
  std::vector<uint32_t> tokens;  // the generated tokens
  std::vector<Vec>
      hidden;  // final hidden state of the prompt's last token, then of each generated one
  uint32_t cached_tokens = 0;    // prompt tokens whose KV came from the cache
  uint32_t computed_tokens = 0;  // prompt tokens computed here
  uint32_t onboarded_blocks = 0;
  uint32_t prefill_chunks = 0;  // ChunkedAttention calls per layer for the prompt
};

class TinyEngine {
 public:
  // kFailedPrecondition when the node's pool does not have the model's layout (fp32,
  // layers x kv_heads x head_dim) or is not in host memory; kInvalidArgument for a chunk
  // of 0 tokens.
  [[nodiscard]] static Result<std::unique_ptr<TinyEngine>> Create(const TinyEngineOptions& options);

  // REQUIRES: prompt is not empty; `sequence` is not in use on this client.
  [[nodiscard]] Result<Generation> Generate(uint64_t sequence, const std::vector<uint32_t>& prompt,
                                            uint32_t new_tokens);

  // StreamingLLM-style: a sequence that keeps its first `sink_tokens` tokens and its last
  // `window_tokens` (seed 000's sink and local window), in a static sequence of that many
  // tokens whose blocks never change; SinkWindowCache maps each token to its ring slot,
  // one token a step (prompt included). Nothing is reused or committed (a rolled ring holds
  // no prefix). REQUIRES: window_tokens >= 1; `sequence` is not in use on this client.
  [[nodiscard]] Result<Generation> GenerateStreaming(uint64_t sequence,
                                                     const std::vector<uint32_t>& prompt,
                                                     uint32_t new_tokens, uint32_t sink_tokens,
                                                     uint32_t window_tokens);
  // The same ring fed a chunk of `chunk_tokens` at a time (a streaming model's input):
  // each chunk written to its ring slots, then attending causally over the ring through
  // ChunkedAttention, whose block table is the ring's in logical order
  // (SinkWindowCache::VisibleBlockTable). Returns every token's hidden state.
  // kInvalidArgument: tokens not a whole number of chunks, a window shorter than a chunk;
  // kFailedPrecondition: sinks, window or chunk not whole blocks.
  [[nodiscard]] Result<std::vector<Vec>> StreamChunks(uint64_t sequence,
                                                      const std::vector<uint32_t>& tokens,
                                                      uint32_t sink_tokens, uint32_t window_tokens,
                                                      uint32_t chunk_tokens);

 private:
  TinyEngine(const TinyEngineOptions& options, KvLayout layout, client::MappedPool pool,
             std::unique_ptr<gpu::KernelBackend> kernels);
  // Runs token `token` at position `position` through every layer, its keys and values
  // written to the pool, attending over positions 0..position. Returns its hidden state.
  Result<Vec> Step(const std::vector<uint32_t>& table, uint32_t position, uint32_t token);
  // Step with the token's KV written to pool slot `slot`, attending over the first
  // `context` positions of the table.
  Result<Vec> StepAt(const std::vector<uint32_t>& table, int64_t slot, uint32_t context,
                     uint32_t token);
  // Runs tokens [first, first + tokens.size()) of a sequence as one chunk through every
  // layer, their keys and values written to the pool, each attending over positions up to
  // its own. Returns their hidden states.
  Result<std::vector<Vec>> PrefillChunk(const std::vector<uint32_t>& table, uint32_t first,
                                        std::span<const uint32_t> tokens);
  // PrefillChunk with the chunk's keys and values written to `slots` (one per token) and
  // read back as the last tokens of the first `context` positions of `table`.
  // StreamChunks over the static sequence's blocks `ring`.
  Result<std::vector<Vec>> StreamInto(const std::vector<uint32_t>& ring,
                                      const std::vector<uint32_t>& tokens, uint32_t sink_tokens,
                                      uint32_t window_tokens, uint32_t chunk_tokens);
  Result<std::vector<Vec>> AttendChunk(const std::vector<int64_t>& slots,
                                       const std::vector<uint32_t>& table, uint32_t context,
                                       std::span<const uint32_t> tokens);
  // One layer's keys or values of `rows` into the pool, row i at slot slots[i].
  Status WriteKvSlots(const std::vector<int64_t>& slots, uint32_t layer, KvPart part,
                      const std::vector<Vec>& rows);

  TinyEngineOptions options_;
  KvLayout layout_;
  client::MappedPool pool_;
  uint32_t pool_blocks_;
  std::unique_ptr<gpu::KernelBackend> kernels_;
};

}  // namespace kvtier::examples
