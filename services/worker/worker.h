// Worker: the pools of one worker node and what the inference processes of the node do
// with them, as a plain C++ library (the RPC server in services/worker/rpc is a thin layer
// over it).
//
// Each pool is a BlockPool (bookkeeping) over a PoolStorage (the bytes): host shared
// memory, or with `device` set the memory of that GPU, shared by CUDA IPC. A process
// attaches a pool (its layout must equal the pool's) and maps the memory itself: block ids
// and the layout travel, bytes never do. Sequences belong to a client (one per connection)
// and span one pool or several (a model whose layers attend over different windows has a
// pool per window: the sequence has a block table in each, and every call covers them
// all); when a client goes (DropClient: its connection dropped), every reference it held
// is released.
//
// Eviction makes room when a pool is full. A victim whose priority is at least
// secondary_offload_min_priority is copied out and handed to the offload target (the
// host/disk tier, storage/); without a target, or when the target refuses, it is dropped.
// Every change to what the worker caches becomes a WorkerEvent with the node's next
// sequence number, for the coordinator.
//
// Thread safety: none; the worker's RPC event loop owns it. HeldBlocks' Copy, Stage and
// Land are the exceptions: any thread, for blocks the loop holds for it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/block_key.h"
#include "common/block_vocabulary.h"
#include "common/clock.h"
#include "common/kv_layout.h"
#include "common/status.h"
#include "services/worker/pool/block_pool.h"
#include "services/worker/pool_storage.h"

namespace kvtier::worker {

using ClientId = uint64_t;

// One evicted block on its way down, valid during the Offload call.
struct OffloadBlock {
  BlockKey key;
  BlockKey parent;
  bool first = false;       // the chain's first block
  uint64_t format_tag = 0;  // the engine's format tag given at Allocate
  uint64_t salt_scope = 0;
  uint8_t priority = kDefaultPriority;
  const KvLayout* layout = nullptr;
  std::span<const uint8_t> bytes;  // the block in pool memory
};

// Where evicted blocks worth keeping go (the host tier: TierLink). Returns OK when the
// block was taken; any error means the block is dropped.
class OffloadTarget {
 public:
  virtual ~OffloadTarget() = default;
  [[nodiscard]] virtual Status Offload(const OffloadBlock& block) = 0;
  // One batch of victims (their bytes valid during the call), one status each. By
  // default one Offload after another; a target may take them in parallel.
  [[nodiscard]] virtual std::vector<Status> OffloadBatch(std::span<const OffloadBlock> blocks);
};

// One block Onboard wants, and where its bytes go.
struct OnboardBlock {
  BlockKey key;
  uint64_t format_tag = 0;
  uint64_t salt_scope = 0;
  const KvLayout* layout = nullptr;
  std::span<uint8_t> out;    // the block in pool memory (host pools), or its staging (device pools)
  BlockId block = kNoBlock;  // the pool block it goes to
};

// The tier a fetched block came from: this node's host or disk tier, or another node
// (kRemoteInPlace: its bytes are already in OnboardBlock::block, landed there by the
// fetch: nothing was copied, and `out` is left as it was).
enum class SourceTier : uint8_t { kHost, kDisk, kRemote, kRemoteInPlace };

// Where Onboard reads blocks from (the node's tiers: TierLink). Returns the tier that
// served the block; kNotFound when the source does not hold it (onboarding stops there);
// any other error likewise stops it and is logged by the caller's metrics, never
// half-written into a block.
class OnboardSource {
 public:
  virtual ~OnboardSource() = default;
  [[nodiscard]] virtual Result<SourceTier> Fetch(const OnboardBlock& block) = 0;
  // A batch of a sequence's blocks in chain order, one result each; Onboard uses the
  // leading run of successes. By default one Fetch after another, stopping at the first
  // failure (the rest: kAborted, not asked); a source may fetch them in parallel, and
  // then may have written the `out` of blocks after a failure too.
  [[nodiscard]] virtual std::vector<Result<SourceTier>> FetchBatch(
      std::span<const OnboardBlock> blocks);
  // After Onboard has landed blocks this source fetched (blocks[i] from tiers[i]) in the
  // pool: a source may let go of copies the pool now holds. By default nothing.
  virtual void Landed(std::span<const OnboardBlock> blocks, std::span<const SourceTier> tiers);
};

// A sequence's next blank blocks, held so that blocks fetched elsewhere land in them in
// place, on another thread (HoldLanding).
struct LandingBlocks {
  uint32_t pool_id = 0;
  uint32_t first_block = 0;          // the sequence's position of blocks[0]
  std::vector<BlockId> blocks = {};  // each held once; give back by ReleaseBlocks
  // Where the fetch writes blocks[i]: its bytes in pool memory (a host pool), or a
  // copier's pinned staging that `staged` scatters into the blocks (a device pool); empty
  // for a device pool's landing larger than a copier's staging (the fetch lands its blocks
  // by HeldBlocks::Land).
  std::vector<std::span<uint8_t>> views = {};
  std::shared_ptr<StagedLanding> staged = {};
};

struct OnboardResult {
  uint32_t onboarded_blocks = 0;  // fetched by this call: from_host + from_disk + from_remote
  uint32_t cached_blocks = 0;     // leading full blocks of the sequence now holding KV
  uint32_t from_host = 0;
  uint32_t from_disk = 0;
  uint32_t from_remote = 0;  // fetched from other nodes
};

// What Onboard needs to know of a sequence to fetch its blocks elsewhere first: of one
// of its pools (`pool_id`), and which pools it spans.
struct SequenceState {
  uint32_t pool_id = 0;
  std::vector<uint32_t> pools = {};  // every pool the sequence spans, as allocated
  KvLayout layout;
  uint64_t format_tag = 0;
  uint64_t salt_scope = 0;
  uint32_t filled_blocks = 0;  // leading full blocks holding KV (reused or onboarded)
};

struct WorkerPoolConfig {
  KvLayout layout;
  uint32_t num_blocks = 0;
};

struct WorkerOptions {
  std::vector<WorkerPoolConfig> pools;
  uint8_t secondary_offload_min_priority = kDefaultPriority;
  bool partial_reuse = true;
  const Clock* clock = &SystemClock::Instance();
  OffloadTarget* offload = nullptr;  // null: evicted blocks are dropped
  OnboardSource* onboard = nullptr;  // null: Onboard finds nothing
  int device = -1;                   // >= 0: pools in this GPU's memory; -1: host shared memory
  // Where the pools' bytes live, when set (tests: MakeBackendPoolStorage runs the device
  // path on the CPU); null: as `device` says.
  PoolStorageFactory pool_storage = nullptr;
};

struct PoolAttachment {
  uint32_t pool_id = 0;
  KvLayout layout;
  uint32_t num_blocks = 0;
  uint64_t block_stride_bytes = 0;
  PoolMapping mapping;  // shared-memory name, or CUDA IPC handle and device
};

struct AllocateRequest {
  ClientId client = 0;
  SequenceId sequence = 0;
  uint32_t pool_id = 0;
  // The pools the sequence spans (distinct, of one block size); empty: `pool_id` alone.
  // The prefix reused is the longest that every one of them serves (a windowed pool by
  // its sinks and last window), and so is the partial reuse after it.
  std::span<const uint32_t> pool_ids = {};
  BlockKey root{};          // RootKey(the tenant's salt)
  uint64_t salt_scope = 0;  // SaltScope(the tenant's salt), for the coordinator
  uint64_t format_tag = 0;  // what else changes KV values (LoRA, model); partial reuse matches it
  std::span<const BlockKey> block_keys = {};  // the prompt's full blocks
  std::span<const uint32_t> tokens = {};      // the prompt; empty: no partial reuse
  uint32_t num_tokens = 0;                    // the prompt's length when `tokens` is empty
  uint32_t reserve_tokens = 0;  // a static sequence's capacity (SequenceRequest); 0: dynamic
};

// A sequence's block table in one of its pools.
struct PoolTable {
  uint32_t pool_id = 0;
  std::vector<BlockId> block_table = {};  // kNoBlock: a block outside the pool's window
};

struct Allocation {
  std::vector<BlockId> block_table;    // the first pool's (tables[0]); kNoBlock: outside its window
  uint32_t reused_blocks = 0;          // leading full blocks found cached
  uint32_t reused_tokens = 0;          // tokens whose KV is already in the table's blocks
  uint32_t partial_tokens = 0;         // of which in the block after the reused ones
  std::vector<PoolTable> tables = {};  // one per pool the sequence spans, as allocated
};

struct WorkerEvent {
  enum class Kind : uint8_t { kStored, kRemoved, kOffloaded };
  Kind kind;
  uint64_t sequence;  // the node's event stream: 1, 2, 3...
  uint32_t pool_id;
  BlockKey key;
  BlockKey parent;  // kStored
  bool first;       // kStored: the chain's first block (parent is the salt root)
  uint8_t priority;
  uint64_t salt_scope;
  Nanos retention{0};  // kStored: how long `priority` holds before reverting; 0: for good
  bool onboarded =
      false;  // kStored: the bytes came from a tier or another node, not this node's engine
  std::vector<uint32_t> tokens =
      {};  // kStored: as committed (empty: without them), for partial matching
};

struct WorkerStats {
  std::vector<BlockPoolStats> pools;
  uint64_t offloaded_blocks = 0;
  uint64_t offloaded_bytes = 0;
  uint64_t dropped_offloads = 0;  // victims worth offloading that the target refused
  uint64_t onboarded_blocks = 0;
  uint64_t onboarded_bytes = 0;
  uint64_t landed_in_place =
      0;  // of onboarded_blocks, fetched from other nodes straight into the pool
  // Wall time moving pool bytes (the gather, scatter and strided-copy kernels with their
  // waits on a GPU; memcpy on the host, except offload: a host pool's victims are read in
  // place by the tier, so their share here is close to nothing), by path.
  Nanos offload_transfer{0};  // victims read out of the pool
  Nanos onboard_transfer{0};  // fetched blocks landed in the pool
  Nanos copy_transfer{0};     // copy-on-partial-reuse
  // Wall time on the worker's loop in the offload target and the onboard source: the
  // victims handed over (hashed, copied into the host tier or written to a store) once
  // read out, and the blocks fetched (from the node's tiers or a peer) before they land.
  Nanos offload_store{0};
  Nanos onboard_fetch{0};
};

class Worker {
 public:
  class Impl;

  // The pool blocks held for a reader or a writer on another thread (a peer's fetch sent
  // off the loop, a peer's blocks landing in place): Hold, HoldLanding, Release,
  // RememberChecksums and FindCommitted on the worker's loop, as every Worker call; Copy,
  // Stage and Land on any thread, for blocks the loop holds. A view of its worker, valid
  // while the worker lives.
  class HeldBlocks {
   public:
    // Committed blocks held for a reader on another thread (a peer's fetch, sent off this
    // loop): their bytes stay as they are until Release drops the hold (the block is
    // neither evicted nor reused meanwhile). For a host pool views[i] is blocks[i]'s bytes in
    // pool memory, which the reader reads in place; a device pool's views are empty: the
    // reader copies the blocks out with Copy. kFailedPrecondition: a block not
    // committed; kNotFound: no such pool. Nothing held on error.
    [[nodiscard]] Result<std::vector<std::span<const uint8_t>>> Hold(
        uint32_t pool_id, std::span<const BlockId> blocks);
    // Blocks Hold holds, copied into `outs` (one block each) on the calling thread, any
    // thread, while this loop goes on: one gather on a device pool's copier of its own
    // (PoolStorage::CopyHeld). kInvalidArgument: no such pool or block, or a buffer that is
    // not one block. REQUIRES: the blocks stay held until the call returns.
    [[nodiscard]] Status Copy(uint32_t pool_id, std::span<const BlockId> blocks,
                              std::span<const std::span<uint8_t>> outs) const;
    // Copy for a reader that sends the bytes on: one gather into a device pool's
    // copier, kept with its pinned staging until the StagedRead goes, where the reader reads
    // them (PoolStorage::StageHeld). Any thread. kInvalidArgument: no such pool or block;
    // kFailedPrecondition: a host pool (its held blocks are read in place);
    // kResourceExhausted: none to spare now, or more than a copier holds (Copy
    // them). REQUIRES: the blocks stay held until the call returns.
    [[nodiscard]] Result<std::unique_ptr<StagedRead>> Stage(uint32_t pool_id,
                                                            std::span<const BlockId> blocks) const;
    // The sequence's full blocks after those it holds KV for, up to `max_blocks` and the
    // first outside its window, each held for a writer on another thread (BlockPool::
    // HoldForWriting: neither freed nor handed out again until Release, whatever
    // the sequence does meanwhile): a peer fetch lands their bytes in place (a host pool's
    // views; a device pool's staged views then `staged`'s Commit, or Land), then
    // Onboard finds them there (its source answers kRemoteInPlace: nothing to copy).
    // kFailedPrecondition: a sequence with no such block; kNotFound: no such sequence.
    // `pool_id`: the pool of a sequence spanning several (nullopt: its first).
    [[nodiscard]] Result<LandingBlocks> HoldLanding(ClientId client, SequenceId sequence,
                                                    uint32_t max_blocks,
                                                    std::optional<uint32_t> pool_id = {});
    // Bytes into blocks HoldLanding holds (ins[i] into blocks[i], one block each) on the
    // calling thread, any thread, while this loop goes on: one scatter on a device pool's
    // copier of its own (PoolStorage::LandHeld). kInvalidArgument: no such pool or block,
    // a repeated block, or a buffer that is not one block. REQUIRES: the blocks stay held
    // until the call returns.
    [[nodiscard]] Status Land(uint32_t pool_id, std::span<const BlockId> blocks,
                              std::span<const std::span<const uint8_t>> ins) const;
    // Drops holds Hold or HoldLanding took, each once (kFailedPrecondition: a block not held as
    // often).
    [[nodiscard]] Status Release(uint32_t pool_id, std::span<const BlockId> blocks);
    // Payload checksums a reader computed of blocks it holds (Hold), kept with the
    // blocks while they stay committed (BlockPool::RememberChecksums; FindCommitted gives
    // them). kNotFound: no such pool.
    [[nodiscard]] Status RememberChecksums(uint32_t pool_id, std::span<const BlockId> blocks,
                                           std::span<const uint64_t> checksums);
    // The committed block `pool_id` caches under `key` (for a peer fetching it); nullopt
    // when the pool lacks it. kNotFound: no such pool.
    [[nodiscard]] Result<std::optional<PoolHolding>> FindCommitted(uint32_t pool_id,
                                                                   const BlockKey& key) const;

   private:
    friend class Worker;
    explicit HeldBlocks(Impl* impl) : impl_(impl) {}
    Impl* impl_;
  };

  // Block bytes to or from host memory, for any pool, outside any sequence: what an
  // embedding process, a peer's fetch of committed blocks or a snapshot reads and writes.
  // On the worker's loop, as every Worker call. A view of its worker, valid while the
  // worker lives.
  class BlockBytes {
   public:
    // The bytes of a host pool (empty for a device pool), for an embedding process.
    // REQUIRES: the pool exists.
    std::span<uint8_t> Host(uint32_t pool_id);
    // One block's bytes. kInvalidArgument for a block outside the pool or a buffer that
    // is not one block; kNotFound: no such pool.
    [[nodiscard]] Status Read(uint32_t pool_id, BlockId block, std::span<uint8_t> out) const;
    // Several blocks of one pool at once (for a GPU pool one gather per round of a
    // copier's staging, where Read is one copy per block); blocks may repeat. Errors as
    // Read's, and kInvalidArgument unless blocks.size() == outs.size().
    [[nodiscard]] Status ReadMany(uint32_t pool_id, std::span<const BlockId> blocks,
                                  std::span<const std::span<uint8_t>> outs) const;
    // Errors as Read's.
    [[nodiscard]] Status Write(uint32_t pool_id, BlockId block, std::span<const uint8_t> in);

   private:
    friend class Worker;
    explicit BlockBytes(Impl* impl) : impl_(impl) {}
    Impl* impl_;
  };

  [[nodiscard]] static Result<std::unique_ptr<Worker>> Create(const WorkerOptions& options);
  ~Worker();

  // kNotFound: no such pool; kFailedPrecondition: `layout` differs (the message names the field).
  [[nodiscard]] Result<PoolAttachment> AttachPool(uint32_t pool_id, const KvLayout& layout) const;

  [[nodiscard]] Result<Allocation> Allocate(const AllocateRequest& request);
  // Grows the sequence to `total_tokens` tokens in every pool it spans (or, refused, in none).
  [[nodiscard]] Result<Allocation> Extend(ClientId client, SequenceId sequence,
                                          uint32_t total_tokens);
  [[nodiscard]] Status Free(ClientId client, SequenceId sequence);
  // Commits the sequence's first block_keys.size() full blocks with the request's
  // retention (prompt_tokens: how many of the sequence's tokens are the prompt), in every
  // pool it spans (a windowed pool: those still in its table). Returns how many blocks
  // (keys) the call cached in some pool.
  [[nodiscard]] Result<uint32_t> Commit(ClientId client, SequenceId sequence,
                                        std::span<const BlockKey> block_keys,
                                        std::span<const uint32_t> tokens,
                                        const kvtier::RetentionConfig& retention);
  // Fills the sequence's blocks after its reused prefix from `source` (null: the
  // worker's own, WorkerOptions::onboard), in order, up to the first block the source
  // lacks, and commits them under `block_keys` (the sequence's full blocks from its
  // first) with the request's retention. Called again with another source, it goes on
  // where the last call stopped. In every pool the sequence spans, or in `pool_id` alone;
  // cached_blocks is what all of them hold (the fewest), the counts are summed over pools.
  [[nodiscard]] Result<OnboardResult> Onboard(ClientId client, SequenceId sequence,
                                              std::span<const BlockKey> block_keys,
                                              const kvtier::RetentionConfig& retention,
                                              OnboardSource* source = nullptr,
                                              std::optional<uint32_t> pool_id = {});
  // The sequence in `pool_id` (nullopt: its first pool). kNotFound: no such sequence of
  // `client`, or a pool it does not span.
  [[nodiscard]] Result<SequenceState> Sequence(ClientId client, SequenceId sequence,
                                               std::optional<uint32_t> pool_id = {}) const;
  // The longest prefix of `keys` that every pool of `pool_ids` serves (BlockPool::
  // ServablePrefixes). kNotFound: no such pool; kInvalidArgument: none given.
  [[nodiscard]] Result<uint32_t> LookupLocal(std::span<const uint32_t> pool_ids,
                                             const BlockKey& root,
                                             std::span<const BlockKey> keys) const;
  [[nodiscard]] Result<uint32_t> LookupLocal(uint32_t pool_id, const BlockKey& root,
                                             std::span<const BlockKey> keys) const {
    return LookupLocal(std::span<const uint32_t>(&pool_id, 1), root, keys);
  }

  // Releases everything `client` holds (its connection is gone). Returns its sequences.
  size_t DropClient(ClientId client);

  void AdvanceTime();
  std::vector<WorkerEvent> TakeEvents();
  WorkerStats Stats() const;
  // Every committed block of every pool (pool id, holding), for a snapshot.
  std::vector<std::pair<uint32_t, PoolHolding>> Holdings() const;
  size_t pool_count() const;
  // kNotFound: no such pool.
  [[nodiscard]] Result<KvLayout> PoolLayout(uint32_t pool_id) const;
  HeldBlocks held() { return HeldBlocks(impl_.get()); }
  BlockBytes bytes() { return BlockBytes(impl_.get()); }

 private:
  explicit Worker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::worker
