// The retention limit. A retention is how long a block keeps the priority it was stored
// with before reverting to the default; engines, nodes and peers send it in milliseconds
// in a u64, 0 for no expiry.
//
// kvtier keeps a retention as a deadline, Now() plus the retention in signed 64-bit
// nanoseconds, which hold 292 years; a wire value past that overflowed (undefined
// behaviour, and a wrapped deadline that expired at once or never). Every place that
// takes a retention from outside converts it here, and a value beyond kMaxRetentionMs is
// refused by name, as a priority above 100 is: an engine wanting no expiry sends 0.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/status.h"

namespace kvtier {

// 100 years: past any deployment, and far from the 292 of the deadlines' range.
inline constexpr uint64_t kMaxRetentionMs = 100ull * 365 * 24 * 60 * 60 * 1000;

// `ms` (0: no expiry) as Nanos. kInvalidArgument beyond kMaxRetentionMs, naming `what`
// (e.g. "block retention") and the value.
[[nodiscard]] inline Result<Nanos> RetentionFromMs(uint64_t ms, std::string_view what) {
  if (ms > kMaxRetentionMs) {
    return InvalidArgumentError(std::string(what) + " of " + std::to_string(ms) +
                                " ms exceeds the limit of " + std::to_string(kMaxRetentionMs) +
                                " ms (100 years); 0 means no expiry");
  }
  return Nanos(std::chrono::milliseconds(ms));
}

}  // namespace kvtier
