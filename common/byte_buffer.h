// ByteBuffer: a std::vector of bytes whose resize() leaves the new bytes uninitialised,
// for buffers that a read fills at once (a peer's blocks received from a socket): the
// zero-fill that std::vector<uint8_t>::resize does would be a pass over every byte for
// nothing
// (docs/history/benchmarks-2026-11.md#a-workers-held-pool-blocks-sent-from-their-pages-2026-11-26-stop-36).
//
// The allocator value-initialises nothing it is not given a value for: construct() with
// no argument default-initialises, which for uint8_t leaves the byte as it is. Everything
// else is std::vector: push_back, insert and resize(n, value) write what they are given.
// The C++ library offers no such buffer (std::make_unique_for_overwrite has no size to
// grow); this adaptor is the usual idiom.
//
// Thread safety: as std::vector.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace kvtier {

template <typename T, typename Base = std::allocator<T>>
class DefaultInitAllocator : public Base {
 public:
  template <typename U>
  struct rebind {
    using other =
        DefaultInitAllocator<U, typename std::allocator_traits<Base>::template rebind_alloc<U>>;
  };
  using Base::Base;

  template <typename U>
  void construct(U* at) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(at)) U;  // default-initialised: a byte keeps what it held
  }
  template <typename U, typename... Args>
  void construct(U* at, Args&&... args) {
    std::allocator_traits<Base>::construct(static_cast<Base&>(*this), at,
                                           std::forward<Args>(args)...);
  }
};

using ByteBuffer = std::vector<uint8_t, DefaultInitAllocator<uint8_t>>;

}  // namespace kvtier
