// GrowFor: room in a std::vector for a batch about to be appended, so that a hot path
// appending a batch of n elements allocates at most once, not log2(n) times.
//
// It keeps the vector's geometric growth: it never reserves exactly size() + more, which
// would move every element again on each call to a vector that accumulates batches
// (quadratic), but at least twice the capacity it had.
//
// Thread safety: as the vector's. Header-only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace kvtier {

// After this, `more` elements can be appended to `v` without allocating.
template <typename T, typename Allocator>
void GrowFor(std::vector<T, Allocator>& v, size_t more) {
  const size_t needed = v.size() + more;
  if (needed > v.capacity()) v.reserve(std::max(needed, 2 * v.capacity()));
}

}  // namespace kvtier
