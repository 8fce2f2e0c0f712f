#include "common/byte_buffer.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace kvtier {
namespace {

// A std::allocator that counts the elements it constructs with a value.
template <typename T>
struct CountingAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = CountingAllocator<U>;
  };
  CountingAllocator() = default;
  template <typename U>
  explicit CountingAllocator(const CountingAllocator<U>& /*other*/) {}
  template <typename U, typename... Args>
  void construct(U* at, Args&&... args) {
    ++constructed;
    ::new (static_cast<void*>(at)) U(std::forward<Args>(args)...);
  }
  static inline size_t constructed = 0;
};

using CountedBuffer =
    std::vector<uint8_t, DefaultInitAllocator<uint8_t, CountingAllocator<uint8_t>>>;

// Room for 1 MiB and some reserved (no reallocation moves bytes below): a resize to
// 1 MiB writes none of its bytes; the values a caller gives are written.
TEST(ByteBufferTest, ResizeLeavesNewBytesUnwrittenAndWritesGivenValues) {
  CountedBuffer buffer;
  buffer.reserve((1 << 20) + 16);
  CountingAllocator<uint8_t>::constructed = 0;
  buffer.resize(1 << 20);
  EXPECT_EQ(buffer.size(), 1u << 20);
  EXPECT_EQ(CountingAllocator<uint8_t>::constructed, 0u) << "no byte written by the resize";

  buffer.resize((1 << 20) + 3, 7);
  EXPECT_GE(CountingAllocator<uint8_t>::constructed, 3u) << "the given value is written";
  EXPECT_EQ(buffer[1 << 20], 7);
  EXPECT_EQ(buffer.back(), 7);
  const uint8_t more[] = {1, 2};
  buffer.insert(buffer.end(), more, more + 2);
  EXPECT_EQ(buffer[(1 << 20) + 3], 1);
  EXPECT_EQ(buffer[(1 << 20) + 4], 2);
}

// ByteBuffer is that buffer over std::allocator: a vector of bytes in every other way.
TEST(ByteBufferTest, AByteBufferKeepsWhatItHoldsAcrossResizes) {
  ByteBuffer buffer = {1, 2, 3};
  buffer.resize(1000);
  buffer.resize(2);
  EXPECT_EQ(buffer, (ByteBuffer{1, 2}));
  buffer.push_back(9);
  EXPECT_EQ(buffer[2], 9);
}

}  // namespace
}  // namespace kvtier
