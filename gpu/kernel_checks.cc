#include "gpu/kernel_checks.h"

#include <string>

namespace kvtier::gpu::internal {
namespace {

std::string Str(uint64_t value) { return std::to_string(value); }

Status NeedPointer(const void* pointer, const char* kernel, const char* name) {
  if (pointer != nullptr) return Status::Ok();
  return InvalidArgumentError(std::string(kernel) + ": " + name + " is null");
}

Status NeedPositive(uint64_t value, const char* kernel, const char* name) {
  if (value > 0) return Status::Ok();
  return InvalidArgumentError(std::string(kernel) + ": " + name + " must be at least 1");
}

Status NeedFloatDtype(KvDtype dtype, const char* kernel, const char* name) {
  if (IsFloatDtype(dtype)) return Status::Ok();
  return InvalidArgumentError(std::string(kernel) + ": " + name +
                              " must be fp32, fp16 or bf16, not " + std::string(DtypeName(dtype)));
}

// A layer of a layout of a float or quantized dtype.
Status NeedLayer(const KvLayout* layout, uint32_t layer, const char* kernel) {
  if (layout == nullptr) return InvalidArgumentError(std::string(kernel) + ": layout is null");
  if (layer >= layout->num_layers()) {
    return OutOfRangeError(std::string(kernel) + ": layer " + Str(layer) + " is out of range [0, " +
                           Str(layout->num_layers() - 1) + "]");
  }
  if (layout->quantized()) return Status::Ok();
  return NeedFloatDtype(layout->dtype(), kernel, "the layout dtype");
}

}  // namespace

bool IsFloatDtype(KvDtype dtype) {
  return dtype == KvDtype::kFp32 || dtype == KvDtype::kFp16 || dtype == KvDtype::kBf16;
}

bool IsQuantizedDtype(KvDtype dtype) {  // of the Quantize and Dequantize kernels
  return dtype == KvDtype::kInt8 || dtype == KvDtype::kFp8E4m3;
}

Status CheckCopy2D(const void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                   size_t width, size_t height) {
  if (width == 0 || height == 0) return Status::Ok();
  if (dst == nullptr || src == nullptr)
    return InvalidArgumentError("Copy2D: dst and src must be set");
  if (dst_pitch < width || src_pitch < width) {
    return InvalidArgumentError("Copy2D: pitches (dst " + std::to_string(dst_pitch) + ", src " +
                                std::to_string(src_pitch) + ") must be at least the width " +
                                std::to_string(width));
  }
  return Status::Ok();
}

Status CheckLinearUpdate(const LinearUpdateArgs& a) {
  constexpr const char* k = "UpdateLinear";
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.cache, k, "cache"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.update, k, "update"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.write_indices, k, "write_indices"));
  KVTIER_RETURN_IF_ERROR(NeedFloatDtype(a.dtype, k, "dtype"));
  KVTIER_RETURN_IF_ERROR(NeedPositive(a.batch, k, "batch"));
  KVTIER_RETURN_IF_ERROR(NeedPositive(a.heads, k, "heads"));
  KVTIER_RETURN_IF_ERROR(NeedPositive(a.max_seq, k, "max_seq"));
  KVTIER_RETURN_IF_ERROR(NeedPositive(a.seq, k, "seq"));
  KVTIER_RETURN_IF_ERROR(NeedPositive(a.head_size, k, "head_size"));
  if (a.seq > a.max_seq) {
    return InvalidArgumentError("UpdateLinear: update length " + Str(a.seq) +
                                " exceeds the cache's max_seq " + Str(a.max_seq));
  }
  return Status::Ok();
}

Status CheckPagedUpdate(const PagedUpdateArgs& a) {
  constexpr const char* k = "UpdatePaged";
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.pool, k, "pool"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.update, k, "update"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.slot_mapping, k, "slot_mapping"));
  KVTIER_RETURN_IF_ERROR(NeedPositive(a.pool_blocks, k, "pool_blocks"));
  KVTIER_RETURN_IF_ERROR(NeedPositive(a.tokens, k, "tokens"));
  KVTIER_RETURN_IF_ERROR(NeedLayer(a.layout, a.layer, k));
  if (a.layout->quantized()) return NeedFloatDtype(a.update_dtype, k, "update_dtype");
  return Status::Ok();
}

Status CheckBlockCopy(const BlockCopyArgs& a) {
  constexpr const char* k = "Gather/Scatter";
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.pool, k, "pool"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.staging, k, "staging"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.block_ids, k, "block_ids"));
  KVTIER_RETURN_IF_ERROR(NeedPositive(a.pool_blocks, k, "pool_blocks"));
  KVTIER_RETURN_IF_ERROR(NeedPositive(a.count, k, "count"));
  if (a.block_bytes == 0 || a.block_bytes % 16 != 0) {
    return InvalidArgumentError("Gather/Scatter: block_bytes " + Str(a.block_bytes) +
                                " must be a positive multiple of 16");
  }
  return Status::Ok();
}

Status CheckQuantize(const QuantizeArgs& a) {
  constexpr const char* k = "Quantize";
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.input, k, "input"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.output, k, "output"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.scales, k, "scales"));
  KVTIER_RETURN_IF_ERROR(NeedFloatDtype(a.input_dtype, k, "input_dtype"));
  if (!IsQuantizedDtype(a.output_dtype)) {
    return InvalidArgumentError("Quantize: output_dtype must be int8 or fp8_e4m3, not " +
                                std::string(DtypeName(a.output_dtype)));
  }
  KVTIER_RETURN_IF_ERROR(NeedPositive(a.tokens, k, "tokens"));
  KVTIER_RETURN_IF_ERROR(NeedPositive(a.heads, k, "heads"));
  return NeedPositive(a.head_dim, k, "head_dim");
}

Status CheckDequantize(const DequantizeArgs& a) {
  constexpr const char* k = "Dequantize";
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.input, k, "input"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.output, k, "output"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.scales, k, "scales"));
  if (!IsQuantizedDtype(a.input_dtype)) {
    return InvalidArgumentError("Dequantize: input_dtype must be int8 or fp8_e4m3, not " +
                                std::string(DtypeName(a.input_dtype)));
  }
  KVTIER_RETURN_IF_ERROR(NeedFloatDtype(a.output_dtype, k, "output_dtype"));
  KVTIER_RETURN_IF_ERROR(NeedPositive(a.tokens, k, "tokens"));
  KVTIER_RETURN_IF_ERROR(NeedPositive(a.heads, k, "heads"));
  return NeedPositive(a.head_dim, k, "head_dim");
}

namespace {

// What both attention kernels check of their shape: the layer of a float layout, query
// heads over its KV heads, the head size, the scale.
Status CheckAttentionShape(const char* k, const KvLayout* layout, uint32_t layer,
                           size_t pool_blocks, uint32_t batch, uint32_t max_blocks,
                           uint32_t query_heads, float scale) {
  KVTIER_RETURN_IF_ERROR(NeedLayer(layout, layer, k));
  KVTIER_RETURN_IF_ERROR(NeedPositive(pool_blocks, k, "pool_blocks"));
  KVTIER_RETURN_IF_ERROR(NeedPositive(batch, k, "batch"));
  KVTIER_RETURN_IF_ERROR(NeedPositive(max_blocks, k, "max_blocks_per_sequence"));
  const uint32_t kv_heads = layout->num_kv_heads();
  if (query_heads == 0 || query_heads % kv_heads != 0) {
    return InvalidArgumentError(std::string(k) + ": num_query_heads " + Str(query_heads) +
                                " must be a positive multiple of the layout's " + Str(kv_heads) +
                                " KV heads");
  }
  if (layout->head_dim() > kMaxAttentionHeadDim) {
    return InvalidArgumentError(std::string(k) + ": head_dim " + Str(layout->head_dim()) +
                                " is above the supported " + Str(kMaxAttentionHeadDim));
  }
  if (!(scale > 0.0f)) return InvalidArgumentError(std::string(k) + ": scale must be positive");
  return Status::Ok();
}

// Sinks exist only in a window (as in a windowed pool's layout).
Status CheckWindow(const char* k, uint32_t window_tokens, uint32_t sink_tokens) {
  if (window_tokens != 0 || sink_tokens == 0) return Status::Ok();
  return InvalidArgumentError(std::string(k) + ": sink_tokens " + Str(sink_tokens) +
                              " needs a window (window_tokens > 0)");
}

}  // namespace

Status CheckDecodeAttention(const DecodeAttentionArgs& a) {
  constexpr const char* k = "DecodeAttention";
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.pool, k, "pool"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.query, k, "query"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.block_tables, k, "block_tables"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.context_lengths, k, "context_lengths"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.output, k, "output"));
  KVTIER_RETURN_IF_ERROR(CheckWindow(k, a.window_tokens, a.sink_tokens));
  return CheckAttentionShape(k, a.layout, a.layer, a.pool_blocks, a.batch,
                             a.max_blocks_per_sequence, a.num_query_heads, a.scale);
}

Status CheckChunkedAttention(const ChunkedAttentionArgs& a) {
  constexpr const char* k = "ChunkedAttention";
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.pool, k, "pool"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.query, k, "query"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.query_starts, k, "query_starts"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.block_tables, k, "block_tables"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.context_lengths, k, "context_lengths"));
  KVTIER_RETURN_IF_ERROR(NeedPointer(a.output, k, "output"));
  KVTIER_RETURN_IF_ERROR(CheckAttentionShape(k, a.layout, a.layer, a.pool_blocks, a.batch,
                                             a.max_blocks_per_sequence, a.num_query_heads,
                                             a.scale));
  KVTIER_RETURN_IF_ERROR(CheckWindow(k, a.window_tokens, a.sink_tokens));
  if (a.query_tokens < a.batch) {
    return InvalidArgumentError("ChunkedAttention: " + Str(a.query_tokens) + " query tokens for " +
                                Str(a.batch) + " sequences: every chunk has at least one");
  }
  return Status::Ok();
}

Status BadWriteIndex(uint32_t batch_element, int64_t value, uint32_t seq, uint32_t max_seq) {
  return OutOfRangeError("UpdateLinear: write_indices[" + Str(batch_element) +
                         "] = " + std::to_string(value) + " with an update of " + Str(seq) +
                         " tokens does not fit max_seq " + Str(max_seq) + "; nothing was written");
}

Status BadSlot(uint32_t token, int64_t slot, size_t pool_slots) {
  return OutOfRangeError("UpdatePaged: slot_mapping[" + Str(token) + "] = " + std::to_string(slot) +
                         " is outside the pool's " + Str(pool_slots) +
                         " slots (or -1 to skip); nothing was written");
}

Status BadBlockId(uint32_t position, int64_t block_id, size_t pool_blocks) {
  return OutOfRangeError(
      "Gather/Scatter: block_ids[" + Str(position) + "] = " + std::to_string(block_id) +
      " is not a block of this pool (it has " + Str(pool_blocks) + "); nothing was copied");
}

Status RepeatedBlockId(uint32_t position, uint32_t block_id) {
  return InvalidArgumentError("Scatter: block_ids[" + Str(position) + "] = " + Str(block_id) +
                              " repeats an earlier block of the batch; nothing was copied");
}

Status BadContextLength(uint32_t sequence, int64_t length, uint32_t max_tokens) {
  return OutOfRangeError("DecodeAttention: context_lengths[" + Str(sequence) + "] = " +
                         std::to_string(length) + " must be in [1, " + Str(max_tokens) + "]");
}

Status BadBlockTableEntry(const char* kernel, uint32_t sequence, uint32_t entry, int64_t block_id,
                          size_t pool_blocks) {
  return OutOfRangeError(std::string(kernel) + ": block_tables[" + Str(sequence) + "][" +
                         Str(entry) + "] = " + std::to_string(block_id) +
                         " is not a block of this pool (it has " + Str(pool_blocks) + ")");
}

Status BadQueryStart(uint32_t index, int64_t value, uint32_t query_tokens) {
  return OutOfRangeError("ChunkedAttention: query_starts[" + Str(index) +
                         "] = " + std::to_string(value) +
                         ": the starts must begin at 0, grow by at least one token per "
                         "sequence and end at query_tokens (" +
                         Str(query_tokens) + ")");
}

Status BadChunkContext(uint32_t sequence, int64_t length, uint32_t chunk, uint32_t max_tokens) {
  return OutOfRangeError("ChunkedAttention: context_lengths[" + Str(sequence) +
                         "] = " + std::to_string(length) + " must be in [" + Str(chunk) + ", " +
                         Str(max_tokens) + "]: the context holds the chunk's " + Str(chunk) +
                         " tokens, within the block table");
}

}  // namespace kvtier::gpu::internal
