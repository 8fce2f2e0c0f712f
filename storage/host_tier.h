// HostTier: blocks in host RAM, the first tier below the GPU pools.
//
// The slab (HostMemory: huge pages where available, pinned through the injected hook
// where CUDA is present) is cut into fixed pages of `page_bytes`; a block takes
// ceil(payload / page_bytes) pages chained in a next-page array, so blocks of every
// layout share one slab without fragmentation and nothing is allocated per page.
// Capacity is exact: a block is stored only when its pages fit, evicting by prioritized
// LRU (common/prioritized_lru.h: every block of the lowest effective priority before any
// of the next, least recently used first) until they do. Expired retention reverts a
// block to the default priority (a heap of expiries, never a scan).
//
// Checksums are verified on Put always (unless a batch item says its caller just did),
// and on Get when `verify_on_get` is set (off by
// default: the bytes were verified when they entered RAM and stay in this process; the
// disk tier always verifies).
//
// Thread safety: safe from any thread. One mutex guards the index and the page lists;
// payloads are copied in and out outside it, so puts and gets of different blocks copy in
// parallel: a get holds its block's pages (an eviction meanwhile leaves them to the last
// reader to free) and a put its freshly taken pages until the copy is done. A put that
// finds no room because every other page is in such a copy (or being evicted by another
// put) gets kResourceExhausted (retry).
//
// Eviction. With an `on_evict` handler, a put that needs room holds its victims (they stay
// readable and findable, no other eviction takes them) and hands them to the handler
// together, outside the lock, so that its work (the tiered store writes them to disk in
// one batch) holds up no other get or put; then each victim leaves, told to `on_evicted`
// under the lock. A PutBatch makes room for all its new blocks at once. A
// Remove of a block while its handler runs removes it at once (told to on_removed); it is
// then not told to on_evicted, whatever the handler did with its bytes. Without a handler
// victims leave under the lock at once.
// REQUIRES: page_bytes a multiple of 4096; capacity_bytes at least one page.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "common/clock.h"
#include "storage/host_memory.h"
#include "storage/tier.h"

namespace kvtier::storage {

class HostTier;

struct HostTierOptions {
  uint64_t capacity_bytes = 0;  // host_cache_size
  uint32_t page_bytes = 64 * 1024;
  uint64_t max_block_bytes = 256ull << 20;  // larger payloads are refused
  bool verify_on_get = false;
  bool try_huge_pages = true;
  std::function<Status(void*, size_t)> pin;  // see HostMemoryOptions
  std::function<void(void*, size_t)> unpin;
  // Told of a put's victims with their payloads, together, outside the lock, before they
  // leave (above); null: evicted blocks are dropped.
  BatchEvictionHandler on_evict;
  // Told under the tier's lock of each put that stored or refreshed a block, each block
  // that left by a Remove or because a get found it corrupt (on_removed), and each
  // evicted block as it leaves: a block's changes here are told in the order they happen.
  std::function<void(const BlockHeader&)> on_stored;
  std::function<void(const BlockHeader&)> on_removed;
  std::function<void(const BlockHeader&)> on_evicted;
  const Clock* clock = &SystemClock::Instance();
};

// A block's payload left where it lies in the tier's pages, for a reader that sends it
// from there (the data stream's gets: no copy into a buffer first). While it lives the
// pages stay the block's, as for a get in progress: an eviction or Remove meanwhile takes
// the block out of the tier but leaves its pages to be freed when the pin goes.
// Thread safety: a pin may be read, moved and destroyed on any thread, one at a time.
// Ownership: must not outlive the tier that gave it.
class PinnedBlock {
 public:
  PinnedBlock() = default;
  PinnedBlock(PinnedBlock&& other) noexcept;
  PinnedBlock& operator=(PinnedBlock&& other) noexcept;
  ~PinnedBlock();

  const BlockHeader& header() const { return header_; }
  // Calls `piece` with the payload in order, a run of contiguous pages at a time.
  void ForEachPiece(const std::function<void(std::span<const uint8_t>)>& piece) const;
  // Unpins after a zero-copy send (vmsplice) whose reader may not have read the bytes
  // yet: the kernel may still hold the pages. The tier then never writes them in place
  // again: before it reuses one it replaces its memory (HostTier::can_lend_pages). The pin
  // becomes empty. An unpin once the reader said it read them is the destructor's.
  // REQUIRES: the tier can_lend_pages().
  void UnpinLent();

 private:
  friend class HostTier;
  PinnedBlock(HostTier* tier, uint32_t first_page, BlockHeader header)
      : tier_(tier), first_page_(first_page), header_(std::move(header)) {}

  HostTier* tier_ = nullptr;  // null: empty (moved from)
  uint32_t first_page_ = 0;
  BlockHeader header_;
};

// Pages taken for a batch of new blocks that the caller fills in place, then stores
// (HostTier::Commit) or abandons (destroyed: the pages go back). The data stream reads a
// put's payloads from its socket straight into them: no copy on the node. Until committed
// the blocks are in no index: gets miss them and no eviction takes their pages.
// Thread safety: one thread at a time; any thread. Ownership: must not outlive the tier.
class HostReservation {
 public:
  HostReservation() = default;
  HostReservation(HostReservation&& other) noexcept;
  HostReservation& operator=(HostReservation&& other) noexcept;
  ~HostReservation();

  const std::vector<BlockHeader>& headers() const { return headers_; }
  // Calls `piece` with block i's payload space in order, a run of contiguous pages at a time.
  void ForEachPiece(size_t i, const std::function<void(std::span<uint8_t>)>& piece) const;

 private:
  friend class HostTier;
  void Release();

  HostTier* tier_ = nullptr;  // null: empty (moved from, or committed)
  std::vector<BlockHeader> headers_;
  std::vector<uint32_t> first_pages_;
};

class HostTier final : public BlockTier {
 public:
  [[nodiscard]] static Result<std::unique_ptr<HostTier>> Create(HostTierOptions options);
  ~HostTier() override;

  Tier kind() const override { return Tier::kHost; }
  [[nodiscard]] Status Put(const BlockHeader& header, std::span<const uint8_t> payload) override;
  // Put for each item, with room made for all of them at once (one eviction batch); when
  // it cannot be made whole, item by item. An item's checksum_checked skips the XXH3 pass
  // (tier.h).
  [[nodiscard]] std::vector<Status> PutBatch(std::span<const PutItem> items) override;
  [[nodiscard]] Result<BlockHeader> Get(const BlockRef& ref, std::span<uint8_t> out) override;
  // The block held in place instead of copied out; counted and touched as a Get, its
  // checksum verified first when `verify_on_get` is set (kDataLoss: dropped, as Get).
  [[nodiscard]] Result<PinnedBlock> Pin(const BlockRef& ref);
  // Pages for new blocks, to be written in place and then committed. Room is made for all
  // of them at once, as PutBatch makes it (the victims leave now, even if the reservation
  // is then abandoned). kFailedPrecondition when a block is stored already or comes twice
  // (its put would refresh a block, not write one: use PutBatch); kInvalidArgument for a
  // header that cannot describe a block; kResourceExhausted as PutBatch, and when the
  // tier's reservations would then hold more than half its pages (writers that are slow
  // to fill them must not empty the tier of the blocks it serves: put the blocks instead).
  [[nodiscard]] Result<HostReservation> Reserve(std::span<const BlockHeader> headers);
  // The filled blocks, each checked against its header's XXH3 and then stored as PutBatch
  // stores it (told to on_stored). Every block is checked before any is stored: when one
  // fails, none is, and its result is kInvalidArgument (the others kAborted).
  // REQUIRES: `reservation` came from this tier's Reserve.
  [[nodiscard]] std::vector<Status> Commit(HostReservation reservation);
  [[nodiscard]] Result<BlockHeader> Peek(const BlockRef& ref) override;
  [[nodiscard]] Status Remove(const BlockRef& ref) override;
  TierStats Stats() const override;
  std::vector<BlockHeader> Headers() const override;
  // Evicts as a put that needs room does (victims in the tier's order, through on_evict)
  // until `bytes` are free or nothing more can go now (every other page being read,
  // written or evicted); returns the bytes free then. For a store that keeps room ahead
  // of its puts (TieredStoreOptions::free_ahead_bytes).
  uint64_t Reclaim(uint64_t bytes);
  // The bytes of pages no block, read, put or reservation holds.
  uint64_t FreeBytes() const;

  bool huge_pages() const;
  bool pinned() const;
  // Whether a pin's pages may be lent to the kernel for a zero-copy send (see
  // PinnedBlock::UnpinLent): a slab neither pinned for DMA nor of explicit huge pages.
  bool can_lend_pages() const;

  class Impl;

 private:
  friend class PinnedBlock;
  friend class HostReservation;
  explicit HostTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::storage
