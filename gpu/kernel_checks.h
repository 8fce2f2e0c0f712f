// Argument checks shared by every kernel backend (internal to gpu/): shapes, dtypes and
// pointers, everything that can be checked without reading backend memory. Index arrays
// are checked by each backend where they live (on the host for the CPU backend, by a
// validation kernel for CUDA), with the messages built here so both backends say the same.
#pragma once

#include <cstdint>
#include <string>

#include "gpu/kernels.h"

namespace kvtier::gpu::internal {

[[nodiscard]] bool IsFloatDtype(KvDtype dtype);      // fp32, fp16, bf16
[[nodiscard]] bool IsQuantizedDtype(KvDtype dtype);  // int8, fp8 e4m3

[[nodiscard]] Status CheckLinearUpdate(const LinearUpdateArgs& args);
[[nodiscard]] Status CheckPagedUpdate(const PagedUpdateArgs& args);
[[nodiscard]] Status CheckBlockCopy(const BlockCopyArgs& args);
[[nodiscard]] Status CheckQuantize(const QuantizeArgs& args);
[[nodiscard]] Status CheckDequantize(const DequantizeArgs& args);
[[nodiscard]] Status CheckDecodeAttention(const DecodeAttentionArgs& args);
[[nodiscard]] Status CheckChunkedAttention(const ChunkedAttentionArgs& args);

// Head dimensions the attention kernels support (one warp lane per 32 elements, at most 8).
inline constexpr uint32_t kMaxAttentionHeadDim = 256;

// Messages for bad index values, as both backends report them.
// Copy2D's arguments: pointers set when there is anything to copy, pitches at least the width.
[[nodiscard]] Status CheckCopy2D(const void* dst, size_t dst_pitch, const void* src,
                                 size_t src_pitch, size_t width, size_t height);
[[nodiscard]] Status BadWriteIndex(uint32_t batch_element, int64_t value, uint32_t seq,
                                   uint32_t max_seq);
[[nodiscard]] Status BadSlot(uint32_t token, int64_t slot, size_t pool_slots);
[[nodiscard]] Status BadBlockId(uint32_t position, int64_t block_id, size_t pool_blocks);
[[nodiscard]] Status RepeatedBlockId(uint32_t position, uint32_t block_id);
[[nodiscard]] Status BadContextLength(uint32_t sequence, int64_t length, uint32_t max_tokens);
// kernel: "DecodeAttention" or "ChunkedAttention".
[[nodiscard]] Status BadBlockTableEntry(const char* kernel, uint32_t sequence, uint32_t entry,
                                        int64_t block_id, size_t pool_blocks);
// query_starts[index] breaks the starts' rules (0 first, increasing, query_tokens last).
[[nodiscard]] Status BadQueryStart(uint32_t index, int64_t value, uint32_t query_tokens);
[[nodiscard]] Status BadChunkContext(uint32_t sequence, int64_t length, uint32_t chunk,
                                     uint32_t max_tokens);

}  // namespace kvtier::gpu::internal
