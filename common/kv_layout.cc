#include "common/kv_layout.h"

#include <array>
#include <bit>
#include <utility>

namespace kvtier {
namespace {

struct DtypeInfo {
  KvDtype dtype;
  std::string_view name;
  size_t bits;
  bool quantized;
};

constexpr std::array<DtypeInfo, 6> kDtypes{{
    {KvDtype::kFp32, "fp32", 32, false},
    {KvDtype::kFp16, "fp16", 16, false},
    {KvDtype::kBf16, "bf16", 16, false},
    {KvDtype::kFp8E4m3, "fp8_e4m3", 8, true},
    {KvDtype::kInt8, "int8", 8, true},
    {KvDtype::kInt4, "int4", 4, true},
}};

// Generous ceilings that catch unit mistakes (bytes for tokens, and the like) without
// limiting any real model: 1024 layers, 1024 KV heads, head_dim 4096, 64Ki-token blocks.
constexpr uint32_t kMaxLayers = 1024;
constexpr uint32_t kMaxKvHeads = 1024;
constexpr uint32_t kMaxHeadDim = 4096;
constexpr uint32_t kMaxTokensPerBlock = 65536;

Status OutOfRange(std::string_view field, uint64_t value, std::string_view allowed) {
  return InvalidArgumentError("kv layout field " + std::string(field) + " = " +
                              std::to_string(value) + " is out of range " + std::string(allowed));
}

}  // namespace

size_t DtypeBits(KvDtype dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return info.bits;
  }
  return 0;
}

bool IsQuantized(KvDtype dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return info.quantized;
  }
  return false;
}

std::string_view DtypeName(KvDtype dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return info.name;
  }
  return "unknown";
}

Result<KvDtype> ParseDtype(std::string_view name) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.name == name) return info.dtype;
  }
  return InvalidArgumentError("unknown KV dtype \"" + std::string(name) +
                              "\" (allowed: fp32, fp16, bf16, fp8_e4m3, int8, int4)");
}

Result<KvLayout> KvLayout::Create(const KvLayoutOptions& o) {
  if (o.num_layers < 1 || o.num_layers > kMaxLayers) {
    return OutOfRange("num_layers", o.num_layers, "[1, 1024]");
  }
  if (o.num_kv_heads < 1 || o.num_kv_heads > kMaxKvHeads) {
    return OutOfRange("num_kv_heads", o.num_kv_heads, "[1, 1024]");
  }
  if (o.head_dim < 1 || o.head_dim > kMaxHeadDim) {
    return OutOfRange("head_dim", o.head_dim, "[1, 4096]");
  }
  if (o.tokens_per_block < 2 || o.tokens_per_block > kMaxTokensPerBlock ||
      !std::has_single_bit(o.tokens_per_block)) {
    return OutOfRange("tokens_per_block", o.tokens_per_block, "(a power of two in [2, 65536])");
  }
  if (DtypeBits(o.dtype) == 0) {
    return InvalidArgumentError("kv layout field dtype has an unknown value " +
                                std::to_string(static_cast<int>(o.dtype)));
  }
  if (o.dtype == KvDtype::kInt4 && o.head_dim % 2 != 0) {
    return InvalidArgumentError("kv layout field head_dim = " + std::to_string(o.head_dim) +
                                " must be even for int4 (two values a byte)");
  }
  if (o.sink_tokens != 0 && o.attention_window == 0) {
    return InvalidArgumentError(
        "kv layout field sink_tokens = " + std::to_string(o.sink_tokens) +
        " requires a limited attention_window (sinks exist only in windowed attention)");
  }
  if (o.attention_window != 0 && o.sink_tokens >= o.attention_window) {
    return OutOfRange(
        "sink_tokens", o.sink_tokens,
        "[0, attention_window - 1] with attention_window = " + std::to_string(o.attention_window));
  }
  return KvLayout(o);
}

KvLayout::KvLayout(const KvLayoutOptions& options)
    : options_(options),
      head_run_bytes_(static_cast<size_t>(options.tokens_per_block) * options.head_dim *
                      DtypeBits(options.dtype) / 8),
      values_bytes_(head_run_bytes_ * 2 * options.num_kv_heads * options.num_layers),
      block_bytes_(values_bytes_ + (IsQuantized(options.dtype)
                                        ? size_t{2} * options.num_layers * options.num_kv_heads *
                                              options.tokens_per_block * sizeof(float)
                                        : 0)) {}

Result<size_t> KvLayout::CheckedByteOffset(uint32_t layer, KvPart part, uint32_t head,
                                           uint32_t token) const {
  if (layer >= options_.num_layers) return OutOfRange("layer", layer, "[0, num_layers)");
  if (part != KvPart::kKey && part != KvPart::kValue) {
    return InvalidArgumentError("kv part must be key or value");
  }
  if (head >= options_.num_kv_heads) return OutOfRange("kv_head", head, "[0, num_kv_heads)");
  if (token >= options_.tokens_per_block)
    return OutOfRange("token", token, "[0, tokens_per_block)");
  return ByteOffset(layer, part, head, token);
}

Status KvLayout::CheckCompatible(const KvLayout& other) const {
  const KvLayoutOptions& a = options_;
  const KvLayoutOptions& b = other.options_;
  const std::array<std::pair<std::string_view, std::pair<uint64_t, uint64_t>>, 6> fields{{
      {"num_layers", {a.num_layers, b.num_layers}},
      {"num_kv_heads", {a.num_kv_heads, b.num_kv_heads}},
      {"head_dim", {a.head_dim, b.head_dim}},
      {"tokens_per_block", {a.tokens_per_block, b.tokens_per_block}},
      {"attention_window", {a.attention_window, b.attention_window}},
      {"sink_tokens", {a.sink_tokens, b.sink_tokens}},
  }};
  for (const auto& [name, values] : fields) {
    if (values.first != values.second) {
      return FailedPreconditionError("kv layout mismatch: " + std::string(name) + " is " +
                                     std::to_string(values.first) + " here but " +
                                     std::to_string(values.second) + " on the other side");
    }
  }
  if (a.dtype != b.dtype) {
    return FailedPreconditionError("kv layout mismatch: dtype is " +
                                   std::string(DtypeName(a.dtype)) + " here but " +
                                   std::string(DtypeName(b.dtype)) + " on the other side");
  }
  return Status::Ok();
}

std::string KvLayout::Fingerprint() const {
  return "L" + std::to_string(options_.num_layers) + "/H" + std::to_string(options_.num_kv_heads) +
         "/D" + std::to_string(options_.head_dim) + "/T" +
         std::to_string(options_.tokens_per_block) + "/" + std::string(DtypeName(options_.dtype)) +
         "/W" + std::to_string(options_.attention_window) + "/S" +
         std::to_string(options_.sink_tokens);
}

}  // namespace kvtier
