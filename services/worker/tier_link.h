// TierLink: a worker's pools and its node's TieredStore, both ways.
//
// Offload: an evicted block becomes a stored block with a full header: key, parent, the
// tenant's salt scope, its priority, an XXH3 checksum of the bytes, and a format tag
// that ties it to the pool's layout and the engine's format tag, "<layout
// fingerprint>|f<hex tag>", so that it is only ever served back to a pool of the same
// layout and format. Fetch (onboard): the store copies the payload straight into the
// pool block or its staging (its checksum verified where the tier verifies). The host
// tier's room goes to blocks no pool holds: a block found on disk is not promoted into
// it (storage::PromoteDiskHits), and one found there leaves it once landed in the pool
// (Landed). The pool offloads either when it evicts it.
//
// With staging_bytes, an offload returns once its blocks are copied into staging; an
// OffloadQueue (offload_queue.h) stores them behind the caller's back, and fetches find
// them in the staging meanwhile. Blocks that find no room there are stored as below.
//
// Batches (OffloadBatch, FetchBatch) are split among `threads` helper threads and the
// caller's: the hashing and copying of a batch's blocks run in parallel, so the worker's
// loop, which waits for the batch, waits a fraction as long (on a GPU node these copies were most
// of the loop's time:
// docs/history/benchmarks-2026-11.md#the-disk-tier-off-the-workers-path-2026-11-27-stop-41). Each
// share of an offload is one store PutBatch, so its victims in the host tier go down to disk in one
// batch. The store takes parallel puts and gets; each block's events stay in order.
//
// Thread safety: as the TieredStore (safe from any thread); a batch's helpers are shared
// by concurrent callers. Ownership: borrows the store, which outlives this object.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "services/worker/offload_queue.h"
#include "services/worker/worker.h"
#include "storage/tiered_store.h"

namespace kvtier::worker {

// The storage format tag of blocks of `layout` written by engines with `format_tag`.
[[nodiscard]] std::string StorageFormatTag(const KvLayout& layout, uint64_t format_tag);
// Whether `tag` is StorageFormatTag(layout, format_tag), where `fingerprint` is
// layout.Fingerprint(): compared in place, so a hot path that checks the tag of every
// block it serves allocates nothing.
[[nodiscard]] bool IsStorageFormatTag(std::string_view tag, std::string_view fingerprint,
                                      uint64_t format_tag);

// The helpers a node gives its TierLink: `configured` (worker.tier_threads) where it is
// not 0, else DefaultTierLinkThreads of this machine.
[[nodiscard]] uint32_t TierLinkThreads(uint32_t configured);
// Half the hardware threads on machines of 16 or more, at most 8; a quarter below that
// (0 on machines of up to 3 threads, where the loop's thread copies alone).
[[nodiscard]] uint32_t DefaultTierLinkThreads(uint32_t hardware_threads);

struct TierLinkOptions {
  storage::TieredStore* store = nullptr;  // required
  // Helper threads for a batch's blocks, beside the caller's; 0: every batch on the
  // caller's thread alone.
  uint32_t threads = 0;
  // Offloads staged and stored by a thread of their own (worker.offload_staging_bytes);
  // 0: each offload is in the store when OffloadBatch returns.
  uint64_t staging_bytes = 0;
};

class TierLink final : public OffloadTarget, public OnboardSource {
 public:
  // REQUIRES: options.store is not null.
  explicit TierLink(TierLinkOptions options);
  ~TierLink() override;
  TierLink(const TierLink&) = delete;
  TierLink& operator=(const TierLink&) = delete;

  [[nodiscard]] Status Offload(const OffloadBlock& block) override;
  [[nodiscard]] Result<SourceTier> Fetch(const OnboardBlock& block) override;
  [[nodiscard]] std::vector<Status> OffloadBatch(std::span<const OffloadBlock> blocks) override;
  // Fetches every block, in parallel: a block after one the store lacks is copied too,
  // and its result says so; Onboard uses the leading run.
  [[nodiscard]] std::vector<Result<SourceTier>> FetchBatch(
      std::span<const OnboardBlock> blocks) override;
  // The blocks landed from the host tier leave it (TieredStore::HostPages::MoveOut), and those
  // answered from the staging are not stored if they still wait (OffloadQueue::Withdraw):
  // the pool holds them, and offloads them back when it evicts them.
  void Landed(std::span<const OnboardBlock> blocks, std::span<const SourceTier> tiers) override;
  // Returns once every offload staged so far is in the store (a node draining, or
  // taking a snapshot of its holdings). Immediate without staging.
  void Flush();
  // The staging's counters; all 0 without staging.
  OffloadQueueStats StagingStats() const;

 private:
  // Stores blocks[i] for each i in `which` now (PutBatch by shares), its status into taken[i].
  void StoreNow(std::span<const OffloadBlock> blocks,
                std::span<const storage::FormatTag* const> formats, std::span<const size_t> which,
                std::vector<Status>& taken);
  // fn(begin, end) for contiguous shares of [0, n): one on the calling thread, the rest
  // on the helpers; returns when every share is done.
  void ForEachShare(size_t n, const std::function<void(size_t, size_t)>& fn);
  // The block as the store keeps it: its full header (`format`: its StorageFormatTag),
  // hashed from its bytes.
  static storage::PutItem StoredItem(const OffloadBlock& block, const storage::FormatTag& format);
  // What a block's read from the store means for Onboard.
  static Result<SourceTier> SourceOf(Result<storage::TieredHit> hit, const OnboardBlock& block);

  storage::TieredStore* const store_;
  const uint32_t threads_;
  class Helpers;  // threads named kvt-tier-N on one asio::io_context (tier_link.cc)
  std::unique_ptr<Helpers> helpers_;     // none when threads_ is 0
  std::unique_ptr<OffloadQueue> queue_;  // none without staging
};

}  // namespace kvtier::worker
