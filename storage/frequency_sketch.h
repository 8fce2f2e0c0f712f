// FrequencySketch: how often each block was requested lately, in a few bits per block
// (TinyLFU's frequency histogram: Einziger, Friedman and Manes, "TinyLFU: A Highly
// Efficient Cache Admission Policy", arXiv:1512.00727).
//
// A count-min sketch of 4-bit counters in 4 rows (an estimate is the minimum over the
// rows, so it never undercounts until it saturates at 15) behind a doorkeeper: a Bloom
// filter that takes a key's first request, so that keys requested once (most keys of a
// long tail) never reach the counters. Estimate is the counters plus the doorkeeper's bit:
// 0 for a key never seen, 1 after one request, at most 16. Every `sample_size` requests
// the sketch ages: counters are halved and the doorkeeper is cleared, so estimates follow
// the recent workload (TinyLFU's reset).
//
// Memory: width * 2 bytes for the counters plus width / 2 for the doorkeeper. Size it to
// the blocks the cache holds: width about their count; sample_size in requests (the
// paper's is ten per cached entry; DiskAdmission's, admission.cc).
//
// Thread safety: none; one owner (DiskAdmission locks around it).
#pragma once

#include <cstdint>
#include <vector>

#include "common/block_key.h"
#include "common/status.h"

namespace kvtier::storage {

struct FrequencySketchOptions {
  uint32_t width = 1 << 16;        // counters per row, a power of two of at least 64
  uint32_t sample_size = 1 << 19;  // requests between two agings, at least 1
};

class FrequencySketch {
 public:
  // kInvalidArgument naming the field out of range.
  [[nodiscard]] static Result<FrequencySketch> Create(const FrequencySketchOptions& options);

  void Record(const BlockKey& key);
  // Requests of `key` since about the last aging: 0 to 16.
  uint8_t Estimate(const BlockKey& key) const;
  uint64_t agings() const { return agings_; }

 private:
  explicit FrequencySketch(const FrequencySketchOptions& options);
  size_t CounterIndex(const BlockKey& key, int row) const;
  uint8_t Counter(size_t index) const;
  uint8_t CounterEstimate(const BlockKey& key) const;
  // The doorkeeper's two bit positions for `key`.
  std::pair<size_t, size_t> DoorBits(const BlockKey& key) const;
  bool AtDoor(const BlockKey& key) const;
  void Age();

  FrequencySketchOptions options_;
  std::vector<uint8_t> counters_;  // 4 rows x width counters of 4 bits, two per byte
  std::vector<uint64_t> door_;     // width * 4 bits
  uint32_t recorded_ = 0;
  uint64_t agings_ = 0;
};

}  // namespace kvtier::storage
