// FuzzChoices: a fuzz input read as a script of choices, one byte each, for targets that
// drive an API by calls rather than parse bytes (coordinator_fuzz, block_pool_fuzz).
//
// A finished input reads as zeros, so every input is a whole script: libFuzzer's
// mutations (a byte flipped, a run cut short) move it to a nearby script.
//
// Thread safety: none; one per input. Ownership: it reads the caller's bytes, which must
// outlive it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvtier::testing {

class FuzzChoices {
 public:
  FuzzChoices(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return at_ >= size_; }
  uint8_t Next() { return at_ < size_ ? data_[at_++] : 0; }
  // A choice in [0, n). REQUIRES: 0 < n <= 256 (one byte decides it).
  uint32_t Below(uint32_t n) { return Next() % n; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

}  // namespace kvtier::testing
