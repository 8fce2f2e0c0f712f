// FrequencyFilter: who may enter a lower tier (host, disk), TinyLFU style.
//
// A count-min sketch of how often each block was requested, with 4-bit counters in 4 rows
// (the minimum over the rows is the estimate) and periodic aging: after `sample_size`
// recorded requests every counter is halved, so the filter follows the recent workload.
// Admit() lets a block in once it was requested at least `min_count` times: blocks seen
// once do not flush a tier that blocks seen twice are using.
//
// Memory: width / 2 bytes per row (4 rows). Thread safety: none; one owner.
#pragma once

#include <cstdint>
#include <vector>

#include "common/block_key.h"
#include "common/status.h"

namespace kvtier::storage {

struct FrequencyFilterOptions {
  uint32_t width = 1 << 16;        // counters per row, a power of two
  uint32_t sample_size = 1 << 18;  // recorded requests between two agings
  uint8_t min_count = 2;           // requests needed to be admitted, in [1, 15]
};

class FrequencyFilter {
 public:
  [[nodiscard]] static Result<FrequencyFilter> Create(const FrequencyFilterOptions& options);

  void Record(const BlockKey& key);
  uint8_t Estimate(const BlockKey& key) const;
  bool Admit(const BlockKey& key) const { return Estimate(key) >= options_.min_count; }
  uint64_t agings() const { return agings_; }

 private:
  explicit FrequencyFilter(const FrequencyFilterOptions& options);
  size_t Index(const BlockKey& key, int row) const;
  uint8_t Counter(size_t index) const;
  void Age();

  FrequencyFilterOptions options_;
  std::vector<uint8_t> counters_;  // 4 rows x width counters of 4 bits, two per byte
  uint32_t recorded_ = 0;
  uint64_t agings_ = 0;
};

}  // namespace kvtier::storage
