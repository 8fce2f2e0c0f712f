// Mooncake-format request traces (FAST'25 release): one JSON object per line with
// `timestamp` (ms from the first request), `input_length` and `output_length` (tokens)
// and `hash_ids` (one prefix-chained id per 512-token block of the prompt).
//
// Used by `kvtier bench` and `kvtier replay`. Thread safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvtier::bench {

inline constexpr uint32_t kMooncakeTokensPerBlock = 512;

struct TraceRequest {
  uint64_t timestamp_ms = 0;
  uint32_t input_length = 0;
  uint32_t output_length = 0;
  std::vector<uint64_t> hash_ids;
};

// kInvalidArgument naming the file, the line and the field for malformed lines; a file
// that cannot be read is kNotFound.
[[nodiscard]] Result<std::vector<TraceRequest>> ReadMooncakeTrace(const std::string& path);

// Parses one line (exposed for tests).
[[nodiscard]] Result<TraceRequest> ParseMooncakeLine(const std::string& line);

}  // namespace kvtier::bench
