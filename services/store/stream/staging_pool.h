// StagingPool: the byte buffers that blocks pass through on a node's data stream, reused
// from one transfer to the next so that the hot path allocates nothing per block (a
// transfer takes one buffer for all of its blocks, and after warm-up that buffer is a
// recycled one).
//
// The pool bounds the bytes held by transfers in flight: Take() refuses with
// kResourceExhausted (retry later) when the buffers handed out would pass `max_bytes`.
// This is the data stream's back-pressure: a node stages at most that much for clients
// that opened transfers and have not yet moved their bytes.
//
// Thread safety: Take() and the release of a StagingBuffer are safe from any thread.
// Ownership: every StagingBuffer must be released before the pool is destroyed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace kvtier::store {

class StagingPool;

// One transfer's bytes; returns its memory to the pool when destroyed. Move-only.
class StagingBuffer {
 public:
  StagingBuffer() = default;
  StagingBuffer(StagingBuffer&& other) noexcept;
  StagingBuffer& operator=(StagingBuffer&& other) noexcept;
  ~StagingBuffer();

  std::span<uint8_t> bytes() const { return {data_.get(), size_}; }
  uint64_t size() const { return size_; }

 private:
  friend class StagingPool;
  void Release();

  StagingPool* pool_ = nullptr;
  std::unique_ptr<uint8_t[]> data_;
  uint64_t size_ = 0;
  uint64_t capacity_ = 0;
};

class StagingPool {
 public:
  // REQUIRES: max_bytes > 0.
  explicit StagingPool(uint64_t max_bytes) : max_bytes_(max_bytes) {}
  ~StagingPool() = default;
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // A buffer of `bytes` (uninitialised); kResourceExhausted when the buffers in use
  // would then exceed the pool's bound, kInvalidArgument when `bytes` alone does.
  [[nodiscard]] Result<StagingBuffer> Take(uint64_t bytes);

  uint64_t in_use_bytes() const;
  // In use plus cached for reuse: the memory the pool holds, never above max_bytes.
  uint64_t held_bytes() const;
  uint64_t max_bytes() const { return max_bytes_; }

 private:
  friend class StagingBuffer;
  struct Free {
    std::unique_ptr<uint8_t[]> data;
    uint64_t capacity = 0;
  };
  void Give(std::unique_ptr<uint8_t[]> data, uint64_t capacity);

  const uint64_t max_bytes_;
  mutable Mutex mu_;
  uint64_t in_use_ KVTIER_GUARDED_BY(mu_) = 0;        // capacity of the buffers handed out
  uint64_t cached_bytes_ KVTIER_GUARDED_BY(mu_) = 0;  // capacity of `free_`
  std::vector<Free> free_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier::store
