#include "examples/tiny_engine/tiny_engine.h"

#include <cmath>

#include "common/sink_window.h"

namespace kvtier::examples {

Result<std::unique_ptr<TinyEngine>> TinyEngine::Create(const TinyEngineOptions& options) {
  if (options.client == nullptr || options.model == nullptr) {
    return InvalidArgumentError("TinyEngineOptions: client and model are required");
  }
  if (options.prefill_chunk_tokens == 0) {
    return InvalidArgumentError("TinyEngineOptions: prefill_chunk_tokens must be at least 1");
  }
  const TinyModelShape& shape = options.model->shape();
  KVTIER_ASSIGN_OR_RETURN(client::WorkerStats stats, options.client->GetWorkerStats());
  if (options.pool_id >= stats.pool_layouts.size()) {
    return NotFoundError("the node has no pool " + std::to_string(options.pool_id));
  }
  const KvLayout layout = stats.pool_layouts[options.pool_id];
  const bool dtype_ok = layout.dtype() == KvDtype::kFp32 || layout.quantized();
  if (!dtype_ok || layout.num_layers() != shape.layers || layout.num_kv_heads() != shape.kv_heads ||
      layout.head_dim() != shape.head_dim) {
    return FailedPreconditionError("the node's pool is " + layout.Fingerprint() +
                                   "; the model needs fp32 (or int8, int4, fp8_e4m3) with " +
                                   std::to_string(shape.layers) + " layers, " +
                                   std::to_string(shape.kv_heads) + " KV heads of " +
                                   std::to_string(shape.head_dim) + " dims");
  }
  KVTIER_ASSIGN_OR_RETURN(client::PoolMapping mapping,
                          options.client->AttachPool(options.pool_id, layout));
  if (mapping.block_stride_bytes != layout.bytes_per_block()) {
    return FailedPreconditionError("pool blocks are " + std::to_string(mapping.block_stride_bytes) +
                                   " bytes apart; the kernels need them packed");
  }
  KVTIER_ASSIGN_OR_RETURN(client::MappedPool pool, client::MappedPool::Map(mapping));
  const uint32_t blocks = mapping.num_blocks;
  std::unique_ptr<TinyEngine> engine(
      new TinyEngine(options, layout, std::move(pool), gpu::MakeCpuBackend()));
  engine->pool_blocks_ = blocks;
  return engine;
}

TinyEngine::TinyEngine(const TinyEngineOptions& options, KvLayout layout, client::MappedPool pool,
                       std::unique_ptr<gpu::KernelBackend> kernels)
    : options_(options),
      layout_(std::move(layout)),
      pool_(std::move(pool)),
      pool_blocks_(0),
      kernels_(std::move(kernels)) {}

Status TinyEngine::WriteKvSlots(const std::vector<int64_t>& slots, uint32_t layer, KvPart part,
                                const std::vector<Vec>& rows) {
  Vec flat;
  for (const Vec& row : rows) flat.insert(flat.end(), row.begin(), row.end());
  return kernels_->UpdatePaged({.pool = pool_.bytes().data(),
                                .pool_blocks = pool_blocks_,
                                .layout = &layout_,
                                .layer = layer,
                                .part = part,
                                .update = flat.data(),
                                .slot_mapping = slots.data(),
                                .tokens = static_cast<uint32_t>(rows.size()),
                                .update_dtype = KvDtype::kFp32});  // a quantized pool scales it
}

Result<Vec> TinyEngine::Step(const std::vector<uint32_t>& table, uint32_t position,
                             uint32_t token) {
  const uint32_t tokens_per_block = layout_.tokens_per_block();
  if (position / tokens_per_block >= table.size()) {
    return InternalError("position " + std::to_string(position) + " is past the block table");
  }
  const int64_t slot =
      int64_t{table[position / tokens_per_block]} * tokens_per_block + position % tokens_per_block;
  return StepAt(table, slot, position + 1, token);
}

Result<Vec> TinyEngine::StepAt(const std::vector<uint32_t>& table, int64_t slot, uint32_t context,
                               uint32_t token) {
  const TinyModel& model = *options_.model;
  const TinyModelShape& shape = model.shape();
  Vec h = model.Embed(token);
  for (uint32_t l = 0; l < shape.layers; ++l) {
    // This token's keys and values go into its slot of the pool, in place.
    KVTIER_RETURN_IF_ERROR(WriteKvSlots({slot}, l, KvPart::kKey, {model.Key(l, h)}));
    KVTIER_RETURN_IF_ERROR(WriteKvSlots({slot}, l, KvPart::kValue, {model.Value(l, h)}));
    // Attention over the first `context` positions of the table (every one so far, cached
    // ones included; or a sink-window cache's whole ring), read from the pool.
    const Vec query = model.Query(l, h);
    Vec attended(size_t{shape.query_heads} * shape.head_dim);
    KVTIER_RETURN_IF_ERROR(
        kernels_->DecodeAttention({.pool = pool_.bytes().data(),
                                   .pool_blocks = pool_blocks_,
                                   .layout = &layout_,
                                   .layer = l,
                                   .batch = 1,
                                   .num_query_heads = shape.query_heads,
                                   .query = query.data(),
                                   .block_tables = table.data(),
                                   .max_blocks_per_sequence = static_cast<uint32_t>(table.size()),
                                   .context_lengths = &context,
                                   .scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim)),
                                   .output = attended.data()}));
    const Vec projected = model.Output(l, attended);
    for (uint32_t i = 0; i < shape.model; ++i) h[i] += projected[i];
  }
  return h;
}

Result<std::vector<Vec>> TinyEngine::PrefillChunk(const std::vector<uint32_t>& table,
                                                  uint32_t first,
                                                  std::span<const uint32_t> tokens) {
  const uint32_t tokens_per_block = layout_.tokens_per_block();
  std::vector<int64_t> slots;
  for (uint32_t p = first; p < first + tokens.size(); ++p) {
    if (p / tokens_per_block >= table.size())
      return InternalError("position " + std::to_string(p) + " is past the block table");
    slots.push_back(int64_t{table[p / tokens_per_block]} * tokens_per_block + p % tokens_per_block);
  }
  return AttendChunk(slots, table, first + static_cast<uint32_t>(tokens.size()), tokens);
}

Result<std::vector<Vec>> TinyEngine::AttendChunk(const std::vector<int64_t>& slots,
                                                 const std::vector<uint32_t>& table,
                                                 uint32_t context,
                                                 std::span<const uint32_t> tokens) {
  const TinyModel& model = *options_.model;
  const TinyModelShape& shape = model.shape();
  const auto chunk = static_cast<uint32_t>(tokens.size());
  const size_t row = size_t{shape.query_heads} * shape.head_dim;
  std::vector<Vec> h;
  for (uint32_t token : tokens) h.push_back(model.Embed(token));
  const uint32_t starts[2] = {0, chunk};
  for (uint32_t l = 0; l < shape.layers; ++l) {
    std::vector<Vec> keys, values;
    Vec queries;
    for (const Vec& x : h) {
      keys.push_back(model.Key(l, x));
      values.push_back(model.Value(l, x));
      const Vec q = model.Query(l, x);
      queries.insert(queries.end(), q.begin(), q.end());
    }
    KVTIER_RETURN_IF_ERROR(WriteKvSlots(slots, l, KvPart::kKey, keys));
    KVTIER_RETURN_IF_ERROR(WriteKvSlots(slots, l, KvPart::kValue, values));
    // The chunk attends over the cached prefix and itself, causally, read from the pool.
    Vec attended(chunk * row);
    KVTIER_RETURN_IF_ERROR(
        kernels_->ChunkedAttention({.pool = pool_.bytes().data(),
                                    .pool_blocks = pool_blocks_,
                                    .layout = &layout_,
                                    .layer = l,
                                    .batch = 1,
                                    .num_query_heads = shape.query_heads,
                                    .query_tokens = chunk,
                                    .query = queries.data(),
                                    .query_starts = starts,
                                    .block_tables = table.data(),
                                    .max_blocks_per_sequence = static_cast<uint32_t>(table.size()),
                                    .context_lengths = &context,
                                    .scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim)),
                                    .output = attended.data()}));
    for (uint32_t t = 0; t < chunk; ++t) {
      const Vec projected =
          model.Output(l, Vec(attended.begin() + t * row, attended.begin() + (t + 1) * row));
      for (uint32_t i = 0; i < shape.model; ++i) h[t][i] += projected[i];
    }
  }
  return h;
}

Result<Generation> TinyEngine::Generate(uint64_t sequence, const std::vector<uint32_t>& prompt,
                                        uint32_t new_tokens) {
  if (prompt.empty()) return InvalidArgumentError("the prompt is empty");
  client::Client& client = *options_.client;
  const uint32_t tokens_per_block = layout_.tokens_per_block();
  const std::vector<BlockKey> keys = client::Client::BlockKeys(prompt, tokens_per_block);
  KVTIER_ASSIGN_OR_RETURN(client::Allocation allocation,
                          client.Allocate({.sequence = sequence,
                                           .pool_id = options_.pool_id,
                                           .keys = keys,
                                           .num_tokens = static_cast<uint32_t>(prompt.size()),
                                           .tokens = prompt}));
  Generation out;
  uint32_t cached_blocks = allocation.reused_blocks;
  if (cached_blocks < keys.size()) {
    KVTIER_ASSIGN_OR_RETURN(client::OnboardResult onboarded, client.Onboard(sequence, keys));
    out.onboarded_blocks = onboarded.onboarded_blocks;
    cached_blocks = std::max(cached_blocks, onboarded.cached_blocks);
  }
  // A partly reused block counts while no onboarded block replaced it.
  const uint32_t partial =
      cached_blocks == allocation.reused_blocks ? allocation.partial_reuse_tokens : 0;
  out.cached_tokens = std::min<uint32_t>(cached_blocks * tokens_per_block + partial,
                                         static_cast<uint32_t>(prompt.size()));
  // Prefill what the cache did not have, chunk by chunk; the last prompt token is always
  // run, for its hidden state (its KV is rewritten with the same values when it was cached).
  const auto length = static_cast<uint32_t>(prompt.size());
  Vec h;
  for (uint32_t first = std::min(out.cached_tokens, length - 1); first < length;
       first += options_.prefill_chunk_tokens) {
    const uint32_t chunk = std::min(options_.prefill_chunk_tokens, length - first);
    KVTIER_ASSIGN_OR_RETURN(
        std::vector<Vec> hidden,
        PrefillChunk(allocation.block_ids, first, std::span(prompt).subspan(first, chunk)));
    h = std::move(hidden.back());
    ++out.prefill_chunks;
  }
  out.computed_tokens = length - out.cached_tokens;
  KVTIER_RETURN_IF_ERROR(client.Commit(sequence, keys, {}, prompt).status());
  out.hidden.push_back(h);

  // Decode: each new token's KV joins the sequence's blocks, which grow as needed.
  std::vector<uint32_t> table = allocation.block_ids;
  uint32_t next = options_.model->NextToken(h);
  for (uint32_t i = 0; i < new_tokens; ++i) {
    const uint32_t position = static_cast<uint32_t>(prompt.size()) + i;
    out.tokens.push_back(next);
    if (position / tokens_per_block >= table.size()) {
      KVTIER_ASSIGN_OR_RETURN(client::Allocation grown, client.Extend(sequence, position + 1));
      table = grown.block_ids;
    }
    KVTIER_ASSIGN_OR_RETURN(h, Step(table, position, next));
    out.hidden.push_back(h);
    next = options_.model->NextToken(h);
  }
  // The answer's full blocks too: the conversation's next turn starts with them.
  std::vector<uint32_t> sequence_tokens = prompt;
  sequence_tokens.insert(sequence_tokens.end(), out.tokens.begin(), out.tokens.end());
  const std::vector<BlockKey> all_keys =
      client::Client::BlockKeys(sequence_tokens, tokens_per_block);
  if (all_keys.size() > keys.size()) {
    // The node learns the sequence's length (Extend was only called for new blocks).
    KVTIER_RETURN_IF_ERROR(
        client.Extend(sequence, static_cast<uint32_t>(sequence_tokens.size())).status());
    KVTIER_RETURN_IF_ERROR(client.Commit(sequence, all_keys, {}, sequence_tokens).status());
  }
  KVTIER_RETURN_IF_ERROR(client.Free(sequence));
  return out;
}

Result<Generation> TinyEngine::GenerateStreaming(uint64_t sequence,
                                                 const std::vector<uint32_t>& prompt,
                                                 uint32_t new_tokens, uint32_t sink_tokens,
                                                 uint32_t window_tokens) {
  if (prompt.empty()) return InvalidArgumentError("the prompt is empty");
  const uint32_t capacity = sink_tokens + window_tokens;
  // A static sequence: its blocks are fixed from here on (CUDA-graph friendly).
  KVTIER_ASSIGN_OR_RETURN(client::Allocation allocation,
                          options_.client->Allocate({.sequence = sequence,
                                                     .pool_id = options_.pool_id,
                                                     .num_tokens = 1,  // its first; no reuse
                                                     .reserve_tokens = capacity}));
  KVTIER_ASSIGN_OR_RETURN(SinkWindowCache cache,
                          SinkWindowCache::Create({.sink_tokens = sink_tokens,
                                                   .window_tokens = window_tokens,
                                                   .chunk_tokens = 1,
                                                   .tokens_per_block = layout_.tokens_per_block(),
                                                   .block_table = allocation.block_ids}));
  Generation out;
  out.computed_tokens = static_cast<uint32_t>(prompt.size());
  Vec h;
  uint32_t next = 0;
  const uint32_t total = static_cast<uint32_t>(prompt.size()) + new_tokens;
  for (uint32_t i = 0; i < total; ++i) {
    const uint32_t token = i < prompt.size() ? prompt[i] : next;
    if (i >= prompt.size()) out.tokens.push_back(token);
    KVTIER_ASSIGN_OR_RETURN(const std::vector<int64_t> slots, cache.BeginChunk(i));
    // Every slot of the ring that holds a token is read: attention does not depend on order.
    const auto visible = static_cast<uint32_t>(cache.VisibleSlots().size());
    KVTIER_ASSIGN_OR_RETURN(h, StepAt(allocation.block_ids, slots[0], visible, token));
    KVTIER_RETURN_IF_ERROR(cache.EndChunk(i));
    if (i + 1 >= prompt.size()) {
      out.hidden.push_back(h);
      next = options_.model->NextToken(h);
    }
  }
  // The ring holds no prefix of the sequence once it rolled: nothing is committed.
  KVTIER_RETURN_IF_ERROR(options_.client->Free(sequence));
  return out;
}

Result<std::vector<Vec>> TinyEngine::StreamChunks(uint64_t sequence,
                                                  const std::vector<uint32_t>& tokens,
                                                  uint32_t sink_tokens, uint32_t window_tokens,
                                                  uint32_t chunk_tokens) {
  if (chunk_tokens == 0 || tokens.empty() || tokens.size() % chunk_tokens != 0) {
    return InvalidArgumentError(std::to_string(tokens.size()) +
                                " tokens are not a whole number of chunks of " +
                                std::to_string(chunk_tokens));
  }
  if (window_tokens < chunk_tokens) {
    return InvalidArgumentError("a window of " + std::to_string(window_tokens) +
                                " tokens is shorter than a chunk of " +
                                std::to_string(chunk_tokens));
  }
  KVTIER_ASSIGN_OR_RETURN(
      client::Allocation allocation,
      options_.client->Allocate({.sequence = sequence,
                                 .pool_id = options_.pool_id,
                                 .num_tokens = 1,
                                 .reserve_tokens = sink_tokens + window_tokens}));
  Result<std::vector<Vec>> hidden =
      StreamInto(allocation.block_ids, tokens, sink_tokens, window_tokens, chunk_tokens);
  KVTIER_RETURN_IF_ERROR(options_.client->Free(sequence));  // a rolled ring is no prefix
  return hidden;
}

Result<std::vector<Vec>> TinyEngine::StreamInto(const std::vector<uint32_t>& ring,
                                                const std::vector<uint32_t>& tokens,
                                                uint32_t sink_tokens, uint32_t window_tokens,
                                                uint32_t chunk_tokens) {
  KVTIER_ASSIGN_OR_RETURN(SinkWindowCache cache,
                          SinkWindowCache::Create({.sink_tokens = sink_tokens,
                                                   .window_tokens = window_tokens,
                                                   .chunk_tokens = chunk_tokens,
                                                   .tokens_per_block = layout_.tokens_per_block(),
                                                   .block_table = ring}));
  std::vector<Vec> hidden;
  for (uint32_t k = 0; size_t{k} * chunk_tokens < tokens.size(); ++k) {
    KVTIER_ASSIGN_OR_RETURN(const std::vector<int64_t> slots, cache.BeginChunk(k));
    KVTIER_ASSIGN_OR_RETURN(const std::vector<uint32_t> table, cache.VisibleBlockTable());
    const auto visible = static_cast<uint32_t>(cache.VisibleSlots().size());
    KVTIER_ASSIGN_OR_RETURN(
        std::vector<Vec> h,
        AttendChunk(slots, table, visible,
                    std::span(tokens).subspan(size_t{k} * chunk_tokens, chunk_tokens)));
    hidden.insert(hidden.end(), h.begin(), h.end());
    KVTIER_RETURN_IF_ERROR(cache.EndChunk(k));
  }
  return hidden;
}

}  // namespace kvtier::examples
