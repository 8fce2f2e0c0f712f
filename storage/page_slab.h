// PageSlab: a host tier's memory (HostMemory) cut into fixed-size pages, and each stored
// block a chain of them: taking and giving back chains, copying bytes in and out, the
// runs of adjacent pages a zero-copy reader is given, and the replacement of pages a
// zero-copy send lent. Internal to storage/ (HostTier keeps the policy: the index,
// eviction, readers, reservations).
//
// Thread safety: Take, Release, Lend and FreePages change or read the free list and the
// lent flags: the caller serializes them under its own mutex, passed to each call (clang's
// analysis checks the caller holds it). A chain's bytes and links are read and written
// without that lock by whoever holds the chain (a put that took it, a reader that pinned
// it): distinct pages, no race.
// Ownership: owns the memory.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "storage/host_memory.h"

namespace kvtier::storage {

class PageSlab {
 public:
  static constexpr uint32_t kNil = UINT32_MAX;  // the end of a chain

  // REQUIRES: page_bytes > 0; memory holds fewer than kNil pages.
  PageSlab(std::unique_ptr<HostMemory> memory, uint64_t page_bytes);

  uint32_t pages() const { return pages_; }
  uint64_t page_bytes() const { return page_bytes_; }
  const HostMemory& memory() const { return *memory_; }
  uint64_t PagesFor(uint64_t bytes) const { return (bytes + page_bytes_ - 1) / page_bytes_; }
  // Pages can be lent when their memory can be replaced under them: a private anonymous
  // mapping of small pages. Not a slab pinned for DMA (the device would keep the old
  // pages) nor explicit huge pages (MADV_DONTNEED takes them whole).
  bool CanLend() const { return !memory_->pinned() && !memory_->explicit_huge_pages(); }

  // `count` free pages as a chain, in the order taken: a fresh slab's free list is in
  // address order, so a block put into fresh pages lies in one run. A page lent and not
  // given back read gets fresh memory first (counted in lent_pages_replaced).
  // REQUIRES: count <= FreePages(mu).
  uint32_t Take(uint64_t count, [[maybe_unused]] const Mutex& mu) KVTIER_REQUIRES(mu);
  // The chain's pages back to the free list; returns how many there were.
  uint64_t Release(uint32_t first, [[maybe_unused]] const Mutex& mu) KVTIER_REQUIRES(mu);
  // The chain's pages were sent zero copy and may still be read by the kernel: each gets
  // fresh memory before it is written again.
  void Lend(uint32_t first, [[maybe_unused]] const Mutex& mu) KVTIER_REQUIRES(mu);
  size_t FreePages([[maybe_unused]] const Mutex& mu) const KVTIER_REQUIRES(mu) {
    return free_.size();
  }
  uint64_t lent_pages_replaced([[maybe_unused]] const Mutex& mu) const KVTIER_REQUIRES(mu) {
    return replaced_;
  }

  // By the chain's holder: `payload` into its pages, or its first out.size() bytes out.
  void CopyIn(uint32_t first, std::span<const uint8_t> payload) const;
  void CopyOut(uint32_t first, std::span<uint8_t> out) const;
  // By the chain's holder: its first `bytes` as runs of pages adjacent in the slab, each
  // to `piece` as one span. Writable for a reservation's holder, read-only for a pin's.
  template <typename Piece>
  void ForEachPiece(uint32_t page, uint64_t bytes, const Piece& piece) const {
    while (bytes > 0) {
      uint64_t run = std::min<uint64_t>(page_bytes_, bytes);
      uint8_t* start = Page(page);
      for (page = next_[page]; run < bytes && page == PageIndex(start + run); page = next_[page])
        run += std::min<uint64_t>(page_bytes_, bytes - run);
      piece(std::span<uint8_t>(start, run));
      bytes -= run;
    }
  }
  // By the chain's holder: its first `bytes`, page by page, appended to `ranges`.
  void AppendPages(uint32_t first, uint64_t bytes,
                   std::vector<std::span<const uint8_t>>& ranges) const;
  // XXH3 of the chain's first `bytes`: the same hash as PayloadChecksum.
  uint64_t Checksum(uint32_t first, uint64_t bytes) const;

 private:
  uint8_t* Page(uint32_t page) const { return memory_->data() + uint64_t{page} * page_bytes_; }
  // The page that starts at `at` (an address inside the slab or just past it).
  uint32_t PageIndex(const uint8_t* at) const {
    return static_cast<uint32_t>(static_cast<uint64_t>(at - memory_->data()) / page_bytes_);
  }

  const std::unique_ptr<HostMemory> memory_;
  const uint64_t page_bytes_;
  const uint32_t pages_;
  // A chain's links: written by Take (under the caller's lock), read by the chain's holder.
  std::vector<uint32_t> next_;
  // Under the caller's lock:
  std::vector<uint32_t> free_;
  std::vector<uint8_t> lent_;  // per page: 1 while lent (Lend) and not yet replaced
  uint64_t replaced_ = 0;
};

}  // namespace kvtier::storage
