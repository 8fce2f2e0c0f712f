#include "storage/page_slab.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "storage/fast_xxh3.h"

namespace kvtier::storage {

PageSlab::PageSlab(std::unique_ptr<HostMemory> memory, uint64_t page_bytes)
    : memory_(std::move(memory)),
      page_bytes_(page_bytes),
      pages_(static_cast<uint32_t>(memory_->size() / page_bytes)),
      next_(pages_),
      lent_(pages_, 0) {
  free_.reserve(pages_);
  for (uint32_t page = pages_; page-- > 0;) free_.push_back(page);
}

uint32_t PageSlab::Take(uint64_t count, const Mutex& /*mu*/) {
  uint32_t first = kNil;
  uint32_t* link = &first;
  for (uint64_t i = 0; i < count; ++i) {
    const uint32_t page = free_.back();
    free_.pop_back();
    if (lent_[page] != 0) {
      // The socket's queues hold references to the page itself, not to this mapping:
      // writing it would change bytes already sent. The mapping gets a fresh zero page (a
      // private anonymous mapping: MADV_DONTNEED drops ours) and the old page lives on
      // until the kernel lets it go.
      lent_[page] = 0;
      madvise(Page(page), page_bytes_, MADV_DONTNEED);  // cannot fail on our own pages
      ++replaced_;
    }
    *link = page;
    link = &next_[page];
  }
  *link = kNil;
  return first;
}

uint64_t PageSlab::Release(uint32_t first, const Mutex& /*mu*/) {
  uint64_t released = 0;
  for (uint32_t page = first; page != kNil; ++released) {
    const uint32_t next = next_[page];
    free_.push_back(page);
    page = next;
  }
  return released;
}

void PageSlab::Lend(uint32_t first, const Mutex& /*mu*/) {
  for (uint32_t page = first; page != kNil; page = next_[page]) lent_[page] = 1;
}

void PageSlab::CopyIn(uint32_t page, std::span<const uint8_t> payload) const {
  for (size_t at = 0; at < payload.size(); at += page_bytes_, page = next_[page]) {
    std::memcpy(Page(page), payload.data() + at,
                std::min<size_t>(page_bytes_, payload.size() - at));
  }
}

void PageSlab::CopyOut(uint32_t page, std::span<uint8_t> out) const {
  for (size_t at = 0; at < out.size(); at += page_bytes_, page = next_[page])
    std::memcpy(out.data() + at, Page(page), std::min<size_t>(page_bytes_, out.size() - at));
}

void PageSlab::AppendPages(uint32_t page, uint64_t bytes,
                           std::vector<std::span<const uint8_t>>& ranges) const {
  for (uint64_t left = bytes; left > 0; page = next_[page]) {
    const uint64_t n = std::min<uint64_t>(left, page_bytes_);
    ranges.emplace_back(Page(page), n);
    left -= n;
  }
}

uint64_t PageSlab::Checksum(uint32_t first, uint64_t bytes) const {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  ForEachPiece(first, bytes, [&](std::span<const uint8_t> piece) {
    XXH3_64bits_update(&state, piece.data(), piece.size());
  });
  return XXH3_64bits_digest(&state);
}

}  // namespace kvtier::storage
