#include "storage/admission.h"

#include <bit>

namespace kvtier::storage {
namespace {
constexpr int kRows = 4;
constexpr uint64_t kSeeds[kRows] = {0x9E3779B97F4A7C15ULL, 0xC2B2AE3D27D4EB4FULL,
                                    0x165667B19E3779F9ULL, 0x27D4EB2F165667C5ULL};
}  // namespace

Result<FrequencyFilter> FrequencyFilter::Create(const FrequencyFilterOptions& options) {
  if (options.width < 64 || !std::has_single_bit(options.width)) {
    return InvalidArgumentError("admission width " + std::to_string(options.width) +
                                " must be a power of two of at least 64");
  }
  if (options.sample_size == 0)
    return InvalidArgumentError("admission sample_size must be positive");
  if (options.min_count < 1 || options.min_count > 15) {
    return InvalidArgumentError("admission min_count " + std::to_string(options.min_count) +
                                " is out of range [1, 15]");
  }
  return FrequencyFilter(options);
}

FrequencyFilter::FrequencyFilter(const FrequencyFilterOptions& options)
    : options_(options), counters_(static_cast<size_t>(kRows) * options.width / 2, 0) {}

size_t FrequencyFilter::Index(const BlockKey& key, int row) const {
  uint64_t h = (key.hi ^ key.lo * kSeeds[row]) * kSeeds[(row + 1) % kRows];
  h ^= h >> 32;
  return static_cast<size_t>(row) * options_.width + (h & (options_.width - 1));
}

uint8_t FrequencyFilter::Counter(size_t index) const {
  const uint8_t byte = counters_[index / 2];
  return index % 2 == 0 ? byte & 0x0F : byte >> 4;
}

void FrequencyFilter::Record(const BlockKey& key) {
  // Conservative update: raise only the rows at the current minimum.
  const uint8_t estimate = Estimate(key);
  if (estimate < 15) {
    for (int row = 0; row < kRows; ++row) {
      const size_t i = Index(key, row);
      if (Counter(i) == estimate)
        counters_[i / 2] = static_cast<uint8_t>(counters_[i / 2] + (i % 2 == 0 ? 1 : 0x10));
    }
  }
  if (++recorded_ >= options_.sample_size) Age();
}

uint8_t FrequencyFilter::Estimate(const BlockKey& key) const {
  uint8_t minimum = 15;
  for (int row = 0; row < kRows; ++row) minimum = std::min(minimum, Counter(Index(key, row)));
  return minimum;
}

void FrequencyFilter::Age() {
  for (uint8_t& byte : counters_)
    byte = static_cast<uint8_t>((byte >> 1) & 0x77);  // halve both nibbles
  recorded_ = 0;
  ++agings_;
}

}  // namespace kvtier::storage
