#include "storage/frequency_sketch.h"

#include <algorithm>
#include <bit>
#include <string>

namespace kvtier::storage {
namespace {
constexpr int kRows = 4;
constexpr uint64_t kSeeds[kRows] = {0x9E3779B97F4A7C15ULL, 0xC2B2AE3D27D4EB4FULL,
                                    0x165667B19E3779F9ULL, 0x27D4EB2F165667C5ULL};
constexpr uint8_t kMaxCounter = 15;

uint64_t Mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDULL;
  h ^= h >> 33;
  return h;
}
}  // namespace

Result<FrequencySketch> FrequencySketch::Create(const FrequencySketchOptions& options) {
  if (options.width < 64 || !std::has_single_bit(options.width)) {
    return InvalidArgumentError("frequency sketch width " + std::to_string(options.width) +
                                " must be a power of two of at least 64");
  }
  if (options.sample_size == 0)
    return InvalidArgumentError("frequency sketch sample_size must be positive");
  return FrequencySketch(options);
}

FrequencySketch::FrequencySketch(const FrequencySketchOptions& options)
    : options_(options),
      counters_(static_cast<size_t>(kRows) * options.width / 2, 0),
      door_(static_cast<size_t>(options.width) * 4 / 64, 0) {}

size_t FrequencySketch::CounterIndex(const BlockKey& key, int row) const {
  uint64_t h = (key.hi ^ key.lo * kSeeds[row]) * kSeeds[(row + 1) % kRows];
  h ^= h >> 32;
  return static_cast<size_t>(row) * options_.width + (h & (options_.width - 1));
}

uint8_t FrequencySketch::Counter(size_t index) const {
  const uint8_t byte = counters_[index / 2];
  return index % 2 == 0 ? byte & 0x0F : byte >> 4;
}

std::pair<size_t, size_t> FrequencySketch::DoorBits(const BlockKey& key) const {
  const uint64_t h = Mix(key.lo ^ Mix(key.hi));
  const size_t bits = door_.size() * 64;  // a power of two
  return {h & (bits - 1), (h >> 32) & (bits - 1)};
}

bool FrequencySketch::AtDoor(const BlockKey& key) const {
  const auto [a, b] = DoorBits(key);
  return (door_[a / 64] >> (a % 64) & 1) != 0 && (door_[b / 64] >> (b % 64) & 1) != 0;
}

void FrequencySketch::Record(const BlockKey& key) {
  if (!AtDoor(key)) {
    const auto [a, b] = DoorBits(key);
    door_[a / 64] |= uint64_t{1} << (a % 64);
    door_[b / 64] |= uint64_t{1} << (b % 64);
  } else if (const uint8_t estimate = CounterEstimate(key); estimate < kMaxCounter) {
    // Conservative update: raise only the rows at the current minimum.
    for (int row = 0; row < kRows; ++row) {
      const size_t i = CounterIndex(key, row);
      if (Counter(i) == estimate)
        counters_[i / 2] = static_cast<uint8_t>(counters_[i / 2] + (i % 2 == 0 ? 1 : 0x10));
    }
  }
  if (++recorded_ >= options_.sample_size) Age();
}

uint8_t FrequencySketch::CounterEstimate(const BlockKey& key) const {
  uint8_t minimum = kMaxCounter;
  for (int row = 0; row < kRows; ++row)
    minimum = std::min(minimum, Counter(CounterIndex(key, row)));
  return minimum;
}

uint8_t FrequencySketch::Estimate(const BlockKey& key) const {
  return static_cast<uint8_t>(CounterEstimate(key) + (AtDoor(key) ? 1 : 0));
}

void FrequencySketch::Age() {
  for (uint8_t& byte : counters_)
    byte = static_cast<uint8_t>((byte >> 1) & 0x77);  // halve both nibbles
  std::fill(door_.begin(), door_.end(), 0);
  recorded_ = 0;
  ++agings_;
}

}  // namespace kvtier::storage
