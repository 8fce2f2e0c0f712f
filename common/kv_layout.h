// KvLayout: the shape of one KV-cache block, and where each value lives inside it.
//
// A block packs every layer of `tokens_per_block` tokens. Its bytes are laid out
//
//   [layer][k|v][kv_head][token][head_dim]
//
// so that one (layer, k|v, head) run of a block is contiguous (tokens_per_block *
// head_dim elements): attention kernels read a head's keys for a block in one sweep,
// and a whole block is one contiguous range for offload and transfer. Only KV heads are
// stored (GQA/MQA share them among query heads).
//
// Quantized dtypes (int8, int4, fp8_e4m3) carry a scale per (layer, k|v, head, token): the
// values are round(x / scale) (int8: scale = max|x| / 127 over the token's head_dim values,
// int4: / 7, two values a byte, the even one in the low nibble; fp8: / 448), and the fp32
// scales follow the values in the block, laid out [layer][k|v][kv_head][token]. So a block
// is still one range for offload and transfer, which move it unchanged. A scale per token,
// not per block, because decode writes a block a token at a time.
//
// Two nodes exchange blocks only when their layouts are equal; CheckCompatible names
// the first field that differs. A mismatch is an error, never a reinterpretation.
//
// Thread safety: an immutable value once created.
//
// REQUIRES: arguments of ByteOffset within the layout (checked by CheckedByteOffset).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kvtier {

enum class KvDtype : uint8_t { kFp32, kFp16, kBf16, kFp8E4m3, kInt8, kInt4 };

[[nodiscard]] size_t DtypeBits(KvDtype dtype);  // 0: not a dtype
// Whole bytes an element takes: 0 for int4 (two a byte) and for what is not a dtype.
[[nodiscard]] inline size_t DtypeBytes(KvDtype dtype) {
  const size_t bits = DtypeBits(dtype);
  return bits % 8 == 0 ? bits / 8 : 0;
}
[[nodiscard]] bool IsQuantized(KvDtype dtype);  // int8, int4, fp8_e4m3: scaled per token
[[nodiscard]] std::string_view DtypeName(KvDtype dtype);
[[nodiscard]] Result<KvDtype> ParseDtype(std::string_view name);

enum class KvPart : uint8_t { kKey = 0, kValue = 1 };

struct KvLayoutOptions {
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t tokens_per_block = 0;  // a power of two > 1
  KvDtype dtype = KvDtype::kFp16;
  uint32_t attention_window = 0;  // tokens; 0 = full attention
  uint32_t sink_tokens = 0;       // tokens always kept at the start of a windowed sequence
};

class KvLayout {
 public:
  // Validates every field; the error names the field and its allowed range.
  [[nodiscard]] static Result<KvLayout> Create(const KvLayoutOptions& options);

  const KvLayoutOptions& options() const { return options_; }
  uint32_t num_layers() const { return options_.num_layers; }
  uint32_t num_kv_heads() const { return options_.num_kv_heads; }
  uint32_t head_dim() const { return options_.head_dim; }
  uint32_t tokens_per_block() const { return options_.tokens_per_block; }
  KvDtype dtype() const { return options_.dtype; }
  uint32_t attention_window() const { return options_.attention_window; }
  uint32_t sink_tokens() const { return options_.sink_tokens; }
  bool windowed() const { return options_.attention_window != 0; }

  bool quantized() const { return IsQuantized(options_.dtype); }
  // Bytes of one token's head_dim values of one (layer, k|v, head).
  size_t bytes_per_head_row() const { return options_.head_dim * DtypeBits(options_.dtype) / 8; }
  // Bytes of one (layer, k|v, head) run: tokens_per_block * head_dim elements.
  size_t bytes_per_head_run() const { return head_run_bytes_; }
  // The values and, for a quantized dtype, the scales after them.
  size_t bytes_per_block() const { return block_bytes_; }
  size_t bytes_of_values() const { return values_bytes_; }

  // Byte offset of element 0 of (layer, part, head, token) inside a block.
  size_t ByteOffset(uint32_t layer, KvPart part, uint32_t head, uint32_t token) const {
    return RunIndex(layer, part, head) * head_run_bytes_ +
           static_cast<size_t>(token) * bytes_per_head_row();
  }
  // Byte offset of the fp32 scale of (layer, part, head, token) inside a block.
  // REQUIRES: quantized().
  size_t ScaleOffset(uint32_t layer, KvPart part, uint32_t head, uint32_t token) const {
    return values_bytes_ +
           (RunIndex(layer, part, head) * options_.tokens_per_block + token) * sizeof(float);
  }
  [[nodiscard]] Result<size_t> CheckedByteOffset(uint32_t layer, KvPart part, uint32_t head,
                                                 uint32_t token) const;

  // OK when blocks of `other` can be read as blocks of this layout; otherwise
  // kFailedPrecondition naming the first differing field and both values.
  [[nodiscard]] Status CheckCompatible(const KvLayout& other) const;

  // A stable text form, e.g. "L32/H8/D128/T16/bf16/W0/S0", used as a format tag.
  std::string Fingerprint() const;

  friend bool operator==(const KvLayout& a, const KvLayout& b) { return a.CheckCompatible(b).ok(); }

 private:
  explicit KvLayout(const KvLayoutOptions& options);

  size_t RunIndex(uint32_t layer, KvPart part, uint32_t head) const {
    return (static_cast<size_t>(layer) * 2 + static_cast<size_t>(part)) * options_.num_kv_heads +
           head;
  }

  KvLayoutOptions options_;
  size_t head_run_bytes_ = 0;
  size_t values_bytes_ = 0;
  size_t block_bytes_ = 0;
};

}  // namespace kvtier
