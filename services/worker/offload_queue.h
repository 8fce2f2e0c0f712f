// OffloadQueue: a worker's offloads handed to its node's store behind the caller's back.
//
// An allocation that evicts blocks must not return before their bytes are safe: the pool
// blocks are reused at once. Storing them (hashing each, copying it into the host tier,
// and the disk writes of whatever that displaces) was most of a worker's thread in a replay
// (docs/history/benchmarks-2026-11.md#offloads-stored-behind-the-allocation-2026-11-27-stop-43).
// Stage copies each block into a staging buffer and returns; a thread of the queue's own
// (kvt-offload) hashes the staged blocks and puts them into the store in batches
// (TieredStore::PutBatch with PutRoom::kOwn: each makes its own room, leaving the room the store
// keeps free to the worker's own puts), then frees their buffers. Until then a staged block is
// still served: CopyStaged finds it by (format tag, key, salt scope), so an onboard right after an
// eviction does not miss it. A block leaves the staged set only after the store has it, so a reader
// that misses here finds it in the store.
//
// A staged block fetched back into a pool is held there again, and the pool offloads it
// once more when it evicts it: Withdraw keeps it out of the host tier (the exclusive host
// tier of TierLink::Landed). One still waiting is dropped unstored; one the thread is
// storing leaves the host tier once stored (TieredStore::HostPages::MoveOut), and stays staged
// until then. Staging the block again (a pool evicted it again) cancels its withdrawal,
// and a block so staged while it was moved out is stored once more.
//
// Memory: staging takes at most `capacity_bytes`. Buffers, their map nodes and the put's headers
// are kept for reuse: no heap allocation per block once warm. A block that finds no room is not
// staged: the caller stores it itself, as without a queue (back-pressure, never a wait).
//
// Failures: a put the store refuses is counted (Stats().failed) and the block is
// dropped, as a refused synchronous offload is; the pool's event already said the block
// left the pool, and the store tells nothing of a block it did not take.
//
// Thread safety: every method is safe from any thread. Lock order: the queue's mutex is
// a leaf (the store is called without it). Ownership: borrows the store, which must
// outlive the queue; the destructor stores everything staged (but withdrawn blocks)
// before it returns.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "services/worker/worker.h"
#include "storage/tiered_store.h"

namespace kvtier::worker {

// The header an offloaded block is stored under, but its checksum (left 0): key, parent,
// chain start, `format` (its StorageFormatTag), salt scope, size and priority.
storage::BlockHeader StoredHeader(const OffloadBlock& block, const storage::FormatTag& format);

struct OffloadQueueOptions {
  storage::TieredStore* store = nullptr;  // required
  uint64_t capacity_bytes = 0;            // staging; REQUIRES: > 0
};

struct OffloadQueueStats {
  uint64_t staged = 0;          // blocks staged
  uint64_t stored = 0;          // of them, taken by the store
  uint64_t failed = 0;          // refused by the store (dropped)
  uint64_t no_room = 0;         // not staged: the staging was full (the caller stored them)
  uint64_t served = 0;          // reads answered from the staging (CopyStaged)
  uint64_t withdrawn = 0;       // fetched back into a pool, so not left in the host tier (Withdraw)
  uint64_t staged_bytes = 0;    // now waiting, in bytes
  uint64_t capacity_bytes = 0;  // the most it may hold (OffloadQueueOptions::capacity_bytes)
};

class OffloadQueue {
 public:
  // REQUIRES: options.store is not null and options.capacity_bytes > 0.
  explicit OffloadQueue(OffloadQueueOptions options);
  ~OffloadQueue();
  OffloadQueue(const OffloadQueue&) = delete;
  OffloadQueue& operator=(const OffloadQueue&) = delete;

  // Copies blocks[i] (stored under formats[i], its StorageFormatTag) into staging. Returns,
  // for each, whether it is staged (or already was): false ones the caller must store
  // (but those of a null format, which are not staged).
  // REQUIRES: formats.size() == blocks.size().
  std::vector<bool> Stage(std::span<const OffloadBlock> blocks,
                          std::span<const storage::FormatTag* const> formats);
  // Copies the staged block `ref` names into `out`: true when one is staged, of out's
  // size (a block of another size is not the one asked for: false).
  bool CopyStaged(const storage::BlockRef& ref, std::span<uint8_t> out);
  // The blocks `refs` names are held by a pool again: those staged are kept out of the
  // host tier (Stats().withdrawn). Refs not staged are ignored.
  void Withdraw(std::span<const storage::BlockRef> refs);
  // Returns once everything staged before the call is in the store (or refused).
  void Flush();
  OffloadQueueStats Stats() const;

 private:
  struct Staged;
  using StagedMap = std::unordered_multimap<BlockKey, Staged*, BlockKeyHash>;
  struct Staged {
    storage::BlockHeader header;  // all but the checksum, made on the queue's thread
    std::vector<uint8_t> bytes;
    StagedMap::node_type node;  // its entry in staged_ while free, to insert again
    bool withdrawn = false;     // to be kept out of the host tier (guarded by mu_)
    bool moved_out = false;     // withdrawn when stored, so moved out (the thread's own)
  };

  // A buffer of `bytes` from the free list, or a new one when the staging has room.
  std::unique_ptr<Staged> TakeBuffer(size_t bytes) KVTIER_REQUIRES(mu_);
  Staged* FindLocked(const storage::BlockRef& ref) KVTIER_REQUIRES(mu_);
  // The block leaves the staged set and its buffer goes back to the free list.
  void ReleaseLocked(std::unique_ptr<Staged> staged) KVTIER_REQUIRES(mu_);
  // Moves the pending blocks into `batch`, but releases those withdrawn.
  void TakePendingLocked(std::vector<std::unique_ptr<Staged>>& batch) KVTIER_REQUIRES(mu_);
  void Run();
  // `items`: the put's, kept from batch to batch (no allocation once warm).
  void StoreBatch(std::vector<std::unique_ptr<Staged>>& batch,
                  std::vector<storage::PutItem>& items);
  // Moves the blocks of `batch` withdrawn by now, and stored, out of the host tier.
  void MoveOutWithdrawn(std::vector<std::unique_ptr<Staged>>& batch,
                        std::span<const Status> stored);

  storage::TieredStore* const store_;
  const uint64_t capacity_bytes_;

  mutable Mutex mu_;
  CondVar work_;  // staged blocks wait, or stop
  CondVar idle_;  // a batch was stored
  std::deque<std::unique_ptr<Staged>> pending_ KVTIER_GUARDED_BY(mu_);
  // Every staged block, pending or being stored, by key.
  StagedMap staged_ KVTIER_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Staged>> free_ KVTIER_GUARDED_BY(mu_);
  uint64_t allocated_bytes_ KVTIER_GUARDED_BY(mu_) = 0;  // every buffer, staged or free
  uint64_t stage_seq_ KVTIER_GUARDED_BY(mu_) = 0;        // blocks ever staged
  uint64_t settled_seq_ KVTIER_GUARDED_BY(mu_) = 0;      // of them, stored or refused
  bool stop_ KVTIER_GUARDED_BY(mu_) = false;
  OffloadQueueStats stats_ KVTIER_GUARDED_BY(mu_);
  std::thread thread_;  // last: it starts once the rest exists
};

}  // namespace kvtier::worker
