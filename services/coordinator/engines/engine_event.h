// Engine KV events: what vLLM, SGLang and TensorRT-LLM publish about their
// prefix caches, decoded from the msgpack payload of one ZMQ message.
//
// The wire format, read from the engines' own sources:
//   vLLM        vllm/distributed/kv_events.py                       @
//   0181ea3173e53eea8cf04a86891488e3dc89bb34 SGLang
//   python/sglang/srt/disaggregation/kv_events.py       @
//   612d579090db24ec7c47cc5ca6b83e0c649b8c28
//                                                                   (and
//                                                                   006d053f182f9b488d2bd841afa06d5f9120a258)
//   TensorRT-LLM tensorrt_llm/_torch/pyexecutor/kv_cache_events.py  @
//   13599e98c71c6903a2d1a240d23be002c2109821
//
// A payload is an EventBatch: an array [ts, events, dp_rank?] (SGLang,
// TensorRT-LLM, older vLLM) or a map {ts, events, data_parallel_rank |
// attn_dp_rank} (vLLM's current structs are not array_like). Each event is
// tagged, either as an array ["BlockStored", fields in declaration order...]
// (msgspec array_like, trailing defaults omitted) or as a map with a "type"
// key; unknown map keys are ignored. The three engines declare their fields in
// one order (a later engine only appends), so one positional list decodes all
// of them:
//   BlockStored  block_hashes, parent_block_hash, token_ids, block_size,
//   lora_id, medium,
//                lora_name, extra_keys, group_idx, kv_cache_spec_kind,
//                kv_cache_spec_sliding_window, locality, mm_keys
//   BlockRemoved block_hashes, medium, group_idx, locality
//   AllBlocksCleared
// Hashes are uint64, int64 (its bit pattern is kept) or bytes (vLLM's sha256
// hashes). TensorRT-LLM's token ids may be strings (multimodal placeholders).
//
// Thread safety: pure functions over values.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"

namespace kvtier::coordinator {

enum class EngineFormat { kVllm, kSglang, kTrtllm };

// "vllm", "sglang" or "trtllm"; kInvalidArgument names anything else.
[[nodiscard]] Result<EngineFormat> ParseEngineFormat(std::string_view name);
std::string_view EngineFormatName(EngineFormat format);

// An engine's block hash as kvtier keeps it: an integer's 64-bit pattern (kind
// 0), or 128 bits of XXH3 over a bytes hash (kind 1), so that both fit one
// fixed-size map key.
struct EngineHash {
  uint64_t hi = 0;
  uint64_t lo = 0;
  friend bool operator==(const EngineHash&, const EngineHash&) = default;
};

struct EngineHashHasher {
  size_t operator()(const EngineHash& h) const {
    return static_cast<size_t>(h.lo * 0x9E3779B97F4A7C15ull ^ h.hi);
  }
};

struct EngineBlockStored {
  std::vector<EngineHash> hashes = {};
  std::optional<EngineHash> parent = {};
  std::vector<uint32_t> tokens = {};  // integer token ids, block after block
  std::vector<std::pair<uint32_t, std::string>> text_tokens = {};  // position, a string token id
  uint32_t block_size = 0;
  std::optional<uint64_t> lora_id = {};
  std::string medium = {};  // "" where absent (the engine's GPU)
  std::string lora_name = {};
  // One entry per block (or none): the block's extra keys, each element written
  // as text (strings as they are, other values with a type prefix:
  // ExtraKeyText).
  std::vector<std::vector<std::string>> extra_keys = {};
  std::string cache_salt = {};  // where the engine sends it as a field
  uint32_t group = 0;
  bool remote = false;  // locality "REMOTE"
};

struct EngineBlockRemoved {
  std::vector<EngineHash> hashes = {};
  std::string medium = {};
  uint32_t group = 0;
  bool remote = false;
};

struct EngineAllCleared {};

using EngineEvent = std::variant<EngineBlockStored, EngineBlockRemoved, EngineAllCleared>;

struct EngineEventBatch {
  double ts = 0;
  std::optional<uint32_t> dp_rank = {};
  std::vector<EngineEvent> events = {};
  uint32_t unknown_events = 0;  // tagged events of a kind kvtier does not know: skipped
};

// Bounds on one payload, so a hostile or broken publisher cannot make the
// decoder allocate without limit.
struct EngineDecodeLimits {
  size_t max_payload_bytes = size_t{64} << 20;
  size_t max_elements = size_t{16} << 20;  // array and map entries, over the whole payload
};

// kInvalidArgument naming what was wrong (not msgpack, not an EventBatch, a
// field of the wrong type, token ids not a whole number of blocks); nothing of
// a bad batch is returned.
[[nodiscard]] Result<EngineEventBatch> DecodeEngineEvents(std::span<const uint8_t> payload,
                                                          const EngineDecodeLimits& limits = {});

}  // namespace kvtier::coordinator
