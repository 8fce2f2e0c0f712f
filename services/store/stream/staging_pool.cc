#include "services/store/stream/staging_pool.h"
#include "common/mutex.h"

#include <algorithm>
#include <string>
#include <utility>

namespace kvtier::store {
namespace {

// Buffers are cut in whole MiB so that transfers of slightly different sizes reuse them.
constexpr uint64_t kGranule = 1ull << 20;

}  // namespace

StagingBuffer::StagingBuffer(StagingBuffer&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      data_(std::move(other.data_)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)) {}

StagingBuffer& StagingBuffer::operator=(StagingBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::exchange(other.pool_, nullptr);
    data_ = std::move(other.data_);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

StagingBuffer::~StagingBuffer() { Release(); }

void StagingBuffer::Release() {
  if (pool_ != nullptr) pool_->Give(std::move(data_), capacity_);
  pool_ = nullptr;
  size_ = capacity_ = 0;
}

Result<StagingBuffer> StagingPool::Take(uint64_t bytes) {
  const uint64_t capacity =
      std::max<uint64_t>(kGranule, (bytes + kGranule - 1) / kGranule * kGranule);
  if (capacity > max_bytes_) {
    return InvalidArgumentError("a transfer of " + std::to_string(bytes) +
                                " bytes exceeds the data stream's " + std::to_string(max_bytes_) +
                                "-byte staging bound");
  }
  StagingBuffer buffer;
  std::vector<Free> dropped;  // freed after the lock is released
  {
    MutexLock lock(mu_);
    const uint64_t available = max_bytes_ - in_use_;
    if (capacity > available) {
      return ResourceExhaustedError("the data stream has " + std::to_string(in_use_) +
                                    " bytes in flight (bound " + std::to_string(max_bytes_) +
                                    "); retry when transfers finish");
    }
    // Best fit among the cached buffers of at least this size, and at most twice it (a
    // much larger one would hold bound that other transfers could use).
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i) {
      const uint64_t c = free_[i].capacity;
      const bool fits = c >= capacity && c <= 2 * capacity && c <= available;
      if (fits && (best == free_.size() || c < free_[best].capacity)) best = i;
    }
    if (best != free_.size()) {
      buffer.data_ = std::move(free_[best].data);
      buffer.capacity_ = free_[best].capacity;
      cached_bytes_ -= buffer.capacity_;
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
    } else {
      // A fresh buffer: drop cached ones until the memory held stays within the bound.
      while (in_use_ + cached_bytes_ + capacity > max_bytes_ && !free_.empty()) {
        cached_bytes_ -= free_.back().capacity;
        dropped.push_back(std::move(free_.back()));
        free_.pop_back();
      }
      buffer.capacity_ = capacity;
    }
    in_use_ += buffer.capacity_;
  }
  if (buffer.data_ == nullptr) {
    buffer.data_.reset(
        new uint8_t[capacity]);  // uninitialised: every byte is written before it is read
  }
  buffer.pool_ = this;
  buffer.size_ = bytes;
  return buffer;
}

void StagingPool::Give(std::unique_ptr<uint8_t[]> data, uint64_t capacity) {
  MutexLock lock(mu_);
  in_use_ -= capacity;
  // Keep what fits under the bound beside the buffers in use; free the rest.
  if (data != nullptr && in_use_ + cached_bytes_ + capacity <= max_bytes_) {
    cached_bytes_ += capacity;
    free_.push_back({std::move(data), capacity});
  }
}

uint64_t StagingPool::in_use_bytes() const {
  MutexLock lock(mu_);
  return in_use_;
}

uint64_t StagingPool::held_bytes() const {
  MutexLock lock(mu_);
  return in_use_ + cached_bytes_;
}

}  // namespace kvtier::store
