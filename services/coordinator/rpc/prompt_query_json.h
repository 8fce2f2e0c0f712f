// The routing API's request body (POST /v1/lookup and /v1/route, http_api.h) read from its
// JSON text:
//
//   {"tokens": [128000, 9906, ...], "cache_salt": "...", "lora_name": "...", "model": "...",
//    "lora_id": 7, "candidates": ["vllm-0", ...], "candidate_active_blocks": [120, ...]}
//
// Every field is optional; null is the same as absent; a key that is none of these is
// skipped (its value must still be JSON), so that gateways may send more; a repeated key's
// last value counts. lora_id is a number or a string of digits (as capnp's JSON codec
// writes a UInt64).
//
// The coordinator reads it (http_api.h) and RoutingClient writes it (PromptQueryJson); the
// shape is http_api.capnp's PromptQuery. Part of kvtier::coordinator_client.
//
// Why not capnp::JsonCodec, which http_api.capnp's annotations drive for the answers: it
// builds a tree of every value before it decodes any, which cost the coordinator's thread
// more than the rest of a 1,024-token lookup, and none of the project's Debian packages
// offers a faster JSON reader. This one reads the one shape the API takes in a single pass
// and accepts exactly RFC 8259's grammar for it.
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvtier::coordinator {

struct PromptQuery {
  std::vector<uint32_t> tokens = {};
  std::string cache_salt = {};
  std::string lora_name = {};
  std::string model = {};
  uint64_t lora_id = 0;
  std::vector<std::string> candidates = {};
  std::vector<uint32_t> candidate_active_blocks = {};
  friend bool operator==(const PromptQuery&, const PromptQuery&) = default;
};

// kInvalidArgument naming what was wrong and the byte it was found at: not JSON, not an
// object, a field of the wrong type, a number that is not a whole number in range, values
// nested deeper than 64.
[[nodiscard]] Result<PromptQuery> ParsePromptQuery(std::string_view json);

// `query` as JSON that ParsePromptQuery reads back equal (what RoutingClient sends).
[[nodiscard]] std::string PromptQueryJson(const PromptQuery& query);

}  // namespace kvtier::coordinator
