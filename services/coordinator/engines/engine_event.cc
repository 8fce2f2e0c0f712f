#include "services/coordinator/engines/engine_event.h"

#include <xxhash.h>

#include <array>
#include <cstring>
#include <limits>
#include <msgpack.hpp>

#include "fmt/format.h"

namespace kvtier::coordinator {
namespace {

using Object = msgpack::object;

Status Bad(std::string_view what) {
  return InvalidArgumentError(fmt::format("engine event batch: {}", what));
}

std::string_view Text(const Object& o) { return {o.via.str.ptr, o.via.str.size}; }
bool IsNil(const Object& o) { return o.type == msgpack::type::NIL; }
bool IsText(const Object& o) { return o.type == msgpack::type::STR; }

Result<uint64_t> Unsigned(const Object& o, std::string_view field) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) return o.via.u64;
  return Bad(fmt::format("{} is not a non-negative integer", field));
}

Result<uint32_t> Small(const Object& o, std::string_view field) {
  KVTIER_ASSIGN_OR_RETURN(uint64_t v, Unsigned(o, field));
  if (v > std::numeric_limits<uint32_t>::max())
    return Bad(fmt::format("{} {} is out of range", field, v));
  return static_cast<uint32_t>(v);
}

Result<EngineHash> Hash(const Object& o) {
  switch (o.type) {
    case msgpack::type::POSITIVE_INTEGER: return EngineHash{0, o.via.u64};
    case msgpack::type::NEGATIVE_INTEGER: return EngineHash{0, static_cast<uint64_t>(o.via.i64)};
    case msgpack::type::BIN:
    case msgpack::type::STR: {
      const XXH128_hash_t h =
          XXH3_128bits(o.type == msgpack::type::BIN ? o.via.bin.ptr : o.via.str.ptr,
                       o.type == msgpack::type::BIN ? o.via.bin.size : o.via.str.size);
      return EngineHash{h.high64 | (uint64_t{1} << 63), h.low64};
    }
    default: return Bad("a block hash is neither an integer nor bytes");
  }
}

Result<std::vector<EngineHash>> Hashes(const Object& o) {
  if (o.type != msgpack::type::ARRAY) return Bad("block_hashes is not an array");
  std::vector<EngineHash> out;
  out.reserve(o.via.array.size);
  for (const Object& h : std::span(o.via.array.ptr, o.via.array.size)) {
    KVTIER_ASSIGN_OR_RETURN(EngineHash hash, Hash(h));
    out.push_back(hash);
  }
  return out;
}

Result<std::string> OptionalText(const Object& o, std::string_view field) {
  if (IsNil(o)) return std::string();
  if (!IsText(o)) return Bad(fmt::format("{} is not a string", field));
  return std::string(Text(o));
}

// One element of an extra-keys tuple as text: strings as they are; other values
// prefixed by their type, so that the string "7" and the integer 7 stay
// different keys.
std::string ExtraKeyText(const Object& o) {
  switch (o.type) {
    case msgpack::type::STR: return std::string(Text(o));
    case msgpack::type::POSITIVE_INTEGER: return fmt::format("\x1fu{}", o.via.u64);
    case msgpack::type::NEGATIVE_INTEGER: return fmt::format("\x1fi{}", o.via.i64);
    case msgpack::type::BIN:
      return "\x1f"
             "b" +
             std::string(o.via.bin.ptr, o.via.bin.size);
    default: {
      msgpack::sbuffer packed;
      msgpack::pack(packed, o);
      return "\x1fm" + std::string(packed.data(), packed.size());
    }
  }
}

Result<std::vector<std::vector<std::string>>> ExtraKeys(const Object& o) {
  std::vector<std::vector<std::string>> out;
  if (IsNil(o)) return out;
  if (o.type != msgpack::type::ARRAY) return Bad("extra_keys is not an array");
  out.resize(o.via.array.size);
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    const Object& entry = o.via.array.ptr[i];
    if (IsNil(entry)) continue;
    if (entry.type != msgpack::type::ARRAY) return Bad("an extra_keys entry is not an array");
    for (const Object& e : std::span(entry.via.array.ptr, entry.via.array.size))
      out[i].push_back(ExtraKeyText(e));
  }
  return out;
}

Status Tokens(const Object& o, EngineBlockStored& out) {
  if (o.type != msgpack::type::ARRAY) return Bad("token_ids is not an array");
  out.tokens.reserve(o.via.array.size);
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    const Object& t = o.via.array.ptr[i];
    if (IsText(t)) {
      out.text_tokens.emplace_back(i, std::string(Text(t)));
      out.tokens.push_back(0);
      continue;
    }
    KVTIER_ASSIGN_OR_RETURN(uint32_t token, Small(t, "a token id"));
    out.tokens.push_back(token);
  }
  return Status::Ok();
}

// The fields of BlockStored, by name: shared by the array form (declaration
// order) and the map form (keys).
constexpr std::array<std::string_view, 12> kStoredFields = {"block_hashes",
                                                            "parent_block_hash",
                                                            "token_ids",
                                                            "block_size",
                                                            "lora_id",
                                                            "medium",
                                                            "lora_name",
                                                            "extra_keys",
                                                            "group_idx",
                                                            "kv_cache_spec_kind",
                                                            "kv_cache_spec_sliding_window",
                                                            "locality"};
constexpr std::array<std::string_view, 4> kRemovedFields = {"block_hashes", "medium", "group_idx",
                                                            "locality"};

// group_idx and locality, which both BlockStored and BlockRemoved carry.
Status PlaceField(std::string_view name, const Object& v, uint32_t& group, bool& remote) {
  if (name == "group_idx" && !IsNil(v)) {
    KVTIER_ASSIGN_OR_RETURN(group, Small(v, "group_idx"));
  } else if (name == "locality") {
    KVTIER_ASSIGN_OR_RETURN(std::string locality, OptionalText(v, "locality"));
    remote = locality == "REMOTE";
  }
  return Status::Ok();
}

Status StoredField(std::string_view name, const Object& v, EngineBlockStored& out) {
  if (name == "block_hashes") {
    KVTIER_ASSIGN_OR_RETURN(out.hashes, Hashes(v));
  } else if (name == "parent_block_hash") {
    if (!IsNil(v)) {
      KVTIER_ASSIGN_OR_RETURN(EngineHash parent, Hash(v));
      out.parent = parent;
    }
  } else if (name == "token_ids") {
    KVTIER_RETURN_IF_ERROR(Tokens(v, out));
  } else if (name == "block_size") {
    KVTIER_ASSIGN_OR_RETURN(out.block_size, Small(v, "block_size"));
  } else if (name == "lora_id") {
    if (!IsNil(v)) {
      KVTIER_ASSIGN_OR_RETURN(uint64_t id, Unsigned(v, "lora_id"));
      out.lora_id = id;
    }
  } else if (name == "medium") {
    KVTIER_ASSIGN_OR_RETURN(out.medium, OptionalText(v, "medium"));
  } else if (name == "lora_name") {
    KVTIER_ASSIGN_OR_RETURN(out.lora_name, OptionalText(v, "lora_name"));
  } else if (name == "extra_keys") {
    KVTIER_ASSIGN_OR_RETURN(out.extra_keys, ExtraKeys(v));
  } else if (name == "cache_salt") {
    KVTIER_ASSIGN_OR_RETURN(out.cache_salt, OptionalText(v, "cache_salt"));
  } else {
    return PlaceField(name, v, out.group, out.remote);
  }
  return Status::Ok();
}

Status RemovedField(std::string_view name, const Object& v, EngineBlockRemoved& out) {
  if (name == "block_hashes") {
    KVTIER_ASSIGN_OR_RETURN(out.hashes, Hashes(v));
  } else if (name == "medium") {
    KVTIER_ASSIGN_OR_RETURN(out.medium, OptionalText(v, "medium"));
  } else {
    return PlaceField(name, v, out.group, out.remote);
  }
  return Status::Ok();
}

// Calls `field(name, value)` for each field of a tagged event, array or map
// form.
template <size_t N, typename Field>
Status EachField(const Object& event, const std::array<std::string_view, N>& names, Field&& field) {
  if (event.type == msgpack::type::ARRAY) {
    const uint32_t n = std::min<uint32_t>(event.via.array.size - 1, N);
    for (uint32_t i = 0; i < n; ++i)
      KVTIER_RETURN_IF_ERROR(field(names[i], event.via.array.ptr[i + 1]));
    return Status::Ok();
  }
  for (const msgpack::object_kv& kv : std::span(event.via.map.ptr, event.via.map.size)) {
    if (IsText(kv.key)) KVTIER_RETURN_IF_ERROR(field(Text(kv.key), kv.val));
  }
  return Status::Ok();
}

Result<std::string_view> EventTag(const Object& event) {
  if (event.type == msgpack::type::ARRAY) {
    if (event.via.array.size == 0 || !IsText(event.via.array.ptr[0]))
      return Bad("an event array has no type tag");
    return Text(event.via.array.ptr[0]);
  }
  if (event.type == msgpack::type::MAP) {
    for (const msgpack::object_kv& kv : std::span(event.via.map.ptr, event.via.map.size)) {
      if (IsText(kv.key) && Text(kv.key) == "type") {
        if (!IsText(kv.val)) return Bad("an event's type is not a string");
        return Text(kv.val);
      }
    }
    return Bad("an event map has no \"type\"");
  }
  return Bad("an event is neither an array nor a map");
}

Status CheckStored(const EngineBlockStored& s) {
  if (s.hashes.empty()) return Bad("BlockStored has no block_hashes");
  if (s.block_size == 0) return Bad("BlockStored has block_size 0");
  if (s.tokens.size() != s.hashes.size() * uint64_t{s.block_size}) {
    return Bad(fmt::format("BlockStored has {} token ids for {} blocks of {}", s.tokens.size(),
                           s.hashes.size(), s.block_size));
  }
  if (!s.extra_keys.empty() && s.extra_keys.size() != s.hashes.size()) {
    return Bad(fmt::format("BlockStored has {} extra_keys entries for {} blocks",
                           s.extra_keys.size(), s.hashes.size()));
  }
  return Status::Ok();
}

Status DecodeEvent(const Object& event, EngineEventBatch& out) {
  KVTIER_ASSIGN_OR_RETURN(std::string_view tag, EventTag(event));
  if (tag == "BlockStored") {
    EngineBlockStored stored;
    KVTIER_RETURN_IF_ERROR(EachField(
        event, kStoredFields,
        [&](std::string_view name, const Object& v) { return StoredField(name, v, stored); }));
    KVTIER_RETURN_IF_ERROR(CheckStored(stored));
    out.events.emplace_back(std::move(stored));
  } else if (tag == "BlockRemoved") {
    EngineBlockRemoved removed;
    KVTIER_RETURN_IF_ERROR(EachField(
        event, kRemovedFields,
        [&](std::string_view name, const Object& v) { return RemovedField(name, v, removed); }));
    out.events.emplace_back(std::move(removed));
  } else if (tag == "AllBlocksCleared") {
    out.events.emplace_back(EngineAllCleared{});
  } else {
    ++out.unknown_events;
  }
  return Status::Ok();
}

Status DecodeEnvelope(const Object& root, const Object*& events, EngineEventBatch& out) {
  const Object* ts = nullptr;
  const Object* rank = nullptr;
  if (root.type == msgpack::type::ARRAY) {
    if (root.via.array.size < 2)
      return Bad("the batch array has fewer than 2 elements [ts, events]");
    ts = &root.via.array.ptr[0];
    events = &root.via.array.ptr[1];
    if (root.via.array.size > 2) rank = &root.via.array.ptr[2];
  } else if (root.type == msgpack::type::MAP) {
    for (const msgpack::object_kv& kv : std::span(root.via.map.ptr, root.via.map.size)) {
      if (!IsText(kv.key)) continue;
      const std::string_view key = Text(kv.key);
      if (key == "ts") ts = &kv.val;
      if (key == "events") events = &kv.val;
      if (key == "data_parallel_rank" || key == "attn_dp_rank" || key == "dp_rank") rank = &kv.val;
    }
    if (events == nullptr) return Bad("the batch map has no \"events\"");
  } else {
    return Bad("the payload is neither an array nor a map");
  }
  if (ts != nullptr && (ts->type == msgpack::type::FLOAT64 || ts->type == msgpack::type::FLOAT32))
    out.ts = ts->via.f64;
  if (ts != nullptr && ts->type == msgpack::type::POSITIVE_INTEGER)
    out.ts = static_cast<double>(ts->via.u64);
  if (rank != nullptr && !IsNil(*rank)) {
    KVTIER_ASSIGN_OR_RETURN(out.dp_rank, Small(*rank, "the dp rank"));
  }
  if (events->type != msgpack::type::ARRAY) return Bad("events is not an array");
  return Status::Ok();
}

}  // namespace

Result<EngineFormat> ParseEngineFormat(std::string_view name) {
  if (name == "vllm") return EngineFormat::kVllm;
  if (name == "sglang") return EngineFormat::kSglang;
  if (name == "trtllm") return EngineFormat::kTrtllm;
  return InvalidArgumentError(
      fmt::format("engine format \"{}\" is not one of vllm, sglang, trtllm", name));
}

std::string_view EngineFormatName(EngineFormat format) {
  switch (format) {
    case EngineFormat::kVllm: return "vllm";
    case EngineFormat::kSglang: return "sglang";
    case EngineFormat::kTrtllm: return "trtllm";
  }
  return "?";
}

Result<EngineEventBatch> DecodeEngineEvents(std::span<const uint8_t> payload,
                                            const EngineDecodeLimits& limits) {
  if (payload.size() > limits.max_payload_bytes) {
    return Bad(fmt::format("payload of {} bytes is over the limit of {}", payload.size(),
                           limits.max_payload_bytes));
  }
  msgpack::object_handle handle;
  try {
    const size_t n = limits.max_elements;
    const msgpack::unpack_limit limit(n, n, limits.max_payload_bytes, limits.max_payload_bytes, n,
                                      8);
    size_t offset = 0;
    handle = msgpack::unpack(reinterpret_cast<const char*>(payload.data()), payload.size(), offset,
                             nullptr, nullptr, limit);
    if (offset != payload.size())
      return Bad(fmt::format("{} bytes after the batch", payload.size() - offset));
  } catch (const std::exception& e) {
    return Bad(fmt::format("not msgpack ({})", e.what()));
  }
  EngineEventBatch out;
  const Object* events = nullptr;
  KVTIER_RETURN_IF_ERROR(DecodeEnvelope(handle.get(), events, out));
  out.events.reserve(events->via.array.size);
  for (const Object& event : std::span(events->via.array.ptr, events->via.array.size)) {
    KVTIER_RETURN_IF_ERROR(DecodeEvent(event, out));
  }
  return out;
}

}  // namespace kvtier::coordinator
