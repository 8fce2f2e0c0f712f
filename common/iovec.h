// Gathered I/O bookkeeping shared by every vectored read and write loop (the disk tier's
// segment appends, the data stream client's socket transfers): after a short readv/
// writev/pwritev, skip what moved and go on from the first buffer left.
//
// Thread safety: a pure function of its arguments.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

namespace kvtier {

// Marks `bytes` moved from iov[first...]: buffers wholly moved become empty, a partly
// moved one starts after what moved. Returns the index of the first buffer with bytes
// left (iov.size() when none is).
// REQUIRES: bytes is at most what iov[first...] holds.
inline size_t ConsumeIovecs(std::span<iovec> iov, size_t first, size_t bytes) {
  while (first < iov.size() && (bytes > 0 || iov[first].iov_len == 0)) {
    const size_t step = std::min(bytes, iov[first].iov_len);
    iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + step;
    iov[first].iov_len -= step;
    bytes -= step;
    if (iov[first].iov_len == 0) ++first;
  }
  return first;
}

}  // namespace kvtier
