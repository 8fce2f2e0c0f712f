// TieredStore: a node's host and disk tiers as one chain, with admission and promotion.
//
// Put lands in the host tier (or the disk tier when the node has no host tier). A block
// the host tier evicts moves down to disk when its effective priority is at least
// `demote_min_priority` (secondary_offload_min_priority, default 35) and, when the disk
// tier is full (the block could only enter by displacing others), the disk's admission
// (`admit_to_disk`, storage/admission.h) accepts it; otherwise it is dropped. While the disk has
// room every block is kept: refusing one then loses a possible hit and saves nothing. The victims
// of one put (a PutBatch makes room for all its blocks at once) go down in one disk batch: one
// write, and under fsync one sync. Get reads host, then disk; a disk hit is promoted into the host
// tier (the disk copy stays, so a later demotion rewrites nothing); GetBatch promotes its disk hits
// together, unless its caller keeps the blocks in a place of its own (PromoteDiskHits::kNo). Every
// change of where a block lives is reported to `on_event` for the node's sequenced event stream, as
// each tier's store or removal: a demotion is the disk's kStored, then the host's kRemoved (for
// that moment the block is in both, and it is readable from both); a block a get finds corrupt is
// dropped from its tier and told as that tier's kRemoved.
//
// Thread safety: safe from any thread; puts run in parallel (their copies and checks
// outside the tiers' locks, and so do the disk writes of the demotions they cause, the
// host tier holding each victim readable meanwhile). With free_ahead_bytes, the store's
// own thread demotes too, as a put would. Lock order: the store's own shared mutex
// (shared by puts, promotions and that thread's demotions; whole for removals), then the host
// tier's, then the disk tier's; the thread's wake-up mutex is taken alone. A block's events are
// told in the order its changes happen in each tier: each tier tells its stores, removals and
// evictions under its own lock. `on_event` and `admit_to_disk` run under those locks, from any
// thread that changes the store: they must be thread-safe and quick, and must not call back into
// the store.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "storage/disk_tier.h"
#include "storage/host_tier.h"

namespace kvtier::storage {

struct StoreEvent {
  enum class Kind : uint8_t { kStored, kRemoved };
  Kind kind;
  Tier tier;
  BlockHeader header;  // key, parent, scope, format, priority, retention left
};

struct TieredStoreOptions {
  std::optional<HostTierOptions> host;  // its handlers (on_*) are the store's; leave them empty
  std::optional<DiskTierOptions> disk;  // likewise
  uint8_t demote_min_priority = kDefaultPriority;
  // With both tiers: a thread of the store's (kvt-demote) keeps this many bytes of the
  // host tier free, moving its coldest blocks down as puts fill it, so that a put seldom
  // waits for the disk (the move down is most of a full tier's put:
  // docs/history/benchmarks-2026-11.md#the-disk-tier-off-the-workers-path-2026-11-27-stop-41).
  // A put that finds less room than it needs still makes the rest itself. The host tier
  // holds up to this much less meanwhile. Rounded down to whole host pages; 0 (or less
  // than a page): no such thread, every put makes its own room.
  uint64_t free_ahead_bytes = 0;
  bool promote_on_hit = true;
  // Asked, when the disk is full, whether a block the host tier evicts may enter it at the
  // cost of the disk blocks it would displace (in eviction order; DiskAdmission::Admit).
  // Refused: the block is dropped, unwritten. Null: every block goes down.
  std::function<bool(const BlockHeader& candidate, std::span<const DisplacedBlock> displaced)>
      admit_to_disk;
  std::function<void(const StoreEvent&)> on_event;
};

// Whose room a PutBatch takes where the store keeps room free ahead of puts
// (free_ahead_bytes).
enum class PutRoom : bool {
  kKeptAhead,  // a caller waits for the put: it may take the room kept free
  // A thread behind its callers (a worker's offload staging): it makes room for its blocks
  // itself, on its own thread, and leaves the room kept ahead to the puts callers wait
  // for (a fetch's promotions). Taking that room, it left them waiting for the disk writes
  // of their demotions
  // (docs/history/benchmarks-2026-11.md#the-stagings-puts-make-their-own-room-2026-11-27-stop-44).
  kOwn,
};

// Whether a GetBatch promotes its disk hits into the host tier (where promote_on_hit lets
// it). A worker that fetches blocks into its pool asks kNo: the host tier would hold a
// copy of a block the pool holds, and the pool offloads the block to the host tier anyway
// when it evicts it. Fetching without promotions raised the replay's block hit rate (more
// room for blocks held nowhere faster) and shortened the worker's fetches
// (docs/history/benchmarks-2026-11.md#a-workers-fetches-no-longer-promote-2026-11-27-stop-44).
enum class PromoteDiskHits : bool { kNo, kYes };

// A TieredStore::Get hit: the block's header and the tier that served it.
struct TieredHit {
  BlockHeader header;
  Tier tier;
};

struct TieredStoreStats {
  std::optional<TierStats> host;
  std::optional<TierStats> disk;
  uint64_t demoted = 0;
  uint64_t demoted_ahead =
      0;  // of `demoted`, those the store's own thread moved (free_ahead_bytes)
  uint64_t dropped_below_priority = 0;
  uint64_t dropped_by_admission = 0;
  uint64_t promoted = 0;
  uint64_t onboarded = 0;  // left the host tier for the pool that fetched them (HostPages::MoveOut)
};

class TieredStore {
 public:
  class Impl;

  // The host tier's pages used in place, beside the copies Put and Get make: a sender
  // gathering from them, a receiver writing into them, a pool taking a block over. A view
  // of its store (valid while the store lives), safe from any thread.
  class HostPages {
   public:
    // The block held in place (HostTier::Pin), for a sender that gathers from there;
    // kNotFound when the host tier does not hold it (Get reads it from disk), kDataLoss
    // when it failed its checksum there (dropped; a Get may still find it on disk).
    [[nodiscard]] Result<PinnedBlock> Pin(const BlockRef& ref);
    // Whether Pin's pins may be unpinned lent (HostTier::can_lend_pages); false without a
    // host tier.
    bool can_lend() const;
    // A put written in place: HostTier::Reserve, then Commit (events and demotions as
    // PutBatch's). kFailedPrecondition from Reserve when the store has no host tier.
    // REQUIRES: a reservation is committed to the store that made it.
    [[nodiscard]] Result<HostReservation> Reserve(std::span<const BlockHeader> headers);
    [[nodiscard]] std::vector<Status> Commit(HostReservation reservation);
    // The block leaves the host tier for a place of the caller's: a worker's pool that
    // has fetched it and landed it (its disk copy, if any, stays). Told as the host's
    // kRemoved; counted in Stats().onboarded. The host tier's room then goes to blocks no
    // pool holds, and the pool offloads the block back when it evicts it. kNotFound when
    // the host tier does not hold it (or is being moved down: the move goes on).
    [[nodiscard]] Status MoveOut(const BlockRef& ref);

   private:
    friend class TieredStore;
    explicit HostPages(Impl* impl) : impl_(impl) {}
    Impl* impl_;
  };

  // kInvalidArgument when neither tier is configured or a tier's handler is set.
  [[nodiscard]] static Result<std::unique_ptr<TieredStore>> Create(TieredStoreOptions options);
  ~TieredStore();

  [[nodiscard]] Status Put(const BlockHeader& header, std::span<const uint8_t> payload);
  [[nodiscard]] std::vector<Status> PutBatch(std::span<const PutItem> items,
                                             PutRoom room = PutRoom::kKeptAhead);
  // The payload into `out`, from the highest tier that has it; kDataLoss as Tier::Get.
  [[nodiscard]] Result<TieredHit> Get(const BlockRef& ref, std::span<uint8_t> out);
  // Get for each block (refs[i] into outs[i]), one result each, with the disk hits
  // promoted together (unless `promote` is kNo): one host tier put for all of them, so
  // that the host blocks they displace go down to disk in one batch (promoted one at a
  // time, each displaced block was a disk write of its own).
  // REQUIRES: refs.size() == outs.size().
  [[nodiscard]] std::vector<Result<TieredHit>> GetBatch(
      std::span<const BlockRef> refs, std::span<const std::span<uint8_t>> outs,
      PromoteDiskHits promote = PromoteDiskHits::kYes);
  [[nodiscard]] Result<BlockHeader> Peek(const BlockRef& ref);
  bool Contains(const BlockRef& ref);
  // Removes the block from every tier; kNotFound when no tier had it.
  [[nodiscard]] Status Remove(const BlockRef& ref);
  // Every copy: (tier, header) for each tier that holds a block, for a snapshot to the
  // coordinator. A block promoted from disk, or caught between a demotion's disk store and
  // its host removal, is listed once per tier, as its events told it.
  std::vector<std::pair<Tier, BlockHeader>> Holdings() const;
  TieredStoreStats Stats() const;
  // Makes everything stored so far durable on the disk tier (a store draining); OK when
  // the node has no disk tier.
  [[nodiscard]] Status Flush();

  // The host tier's pages in place (HostPages); its calls fail as documented there when
  // the store has no host tier.
  HostPages host_pages() { return HostPages(impl_.get()); }

 private:
  explicit TieredStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::storage
