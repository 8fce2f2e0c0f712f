// PoolBlockSource: a worker's pools as a read-only block source for its BlockStore
// capability, so that a peer onboarding a prefix this worker computed fetches the blocks
// straight from its pool (cross-node reuse without a trip through a store).
//
// A committed block is served only for the salt scope it was committed under and for the
// storage format of its pool's layout and engine format tag (services/worker/tier_link.h
// StorageFormatTag). Its checksum is left 0 until a reader that held it gives back the
// one it computed (ReleaseBatch), which the pool then keeps while the block stays
// committed: the BlockStore serving a block hashes the bytes read (store::WithChecksum,
// on the stream's threads for a keyed get) only the first time. Priority travels;
// retention does not (a fetching worker commits the block with its own request's
// retention). HoldBatch holds the blocks (Worker::HeldBlocks::Hold), so that this node's loop
// only finds and releases them: a keyed get sends a host pool's from their pages, and a
// device pool's from a copier's pinned staging (StageHeld: one gather, on a copier of
// the pool's own, kept until they are sent; CopyHeld where none is to spare) on the
// stream's threads.
//
// Thread safety: none, as the Worker: the node's event loop owns both. Held blocks are
// the exception: any thread may read their bytes, or CopyHeld them, until ReleaseBatch.
// Ownership: borrows the worker, which outlives this object.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "services/store/rpc/store_service.h"
#include "services/worker/worker.h"

namespace kvtier::worker {

class PoolBlockSource final : public store::ExtraBlockSource {
 public:
  explicit PoolBlockSource(Worker* worker);
  [[nodiscard]] Result<storage::BlockHeader> Peek(const storage::BlockRef& ref) override;
  [[nodiscard]] Result<storage::BlockHeader> Read(const storage::BlockRef& ref,
                                                  std::span<uint8_t> out) override;
  // Each block found, held (a device pool's held apart); one Worker::HeldBlocks::Hold per pool.
  // A hold names the pool (high 32 bits) and the block.
  [[nodiscard]] std::vector<Result<store::HeldBlock>> HoldBatch(
      std::span<const storage::BlockRef> refs) override;
  // Keeps the checksums given (Worker::HeldBlocks::RememberChecksums) before it gives the holds
  // back: a block's next reader gets its checksum in its header and hashes nothing.
  [[nodiscard]] Status ReleaseBatch(std::span<const uint64_t> holds,
                                    std::span<const uint64_t> checksums) override;
  // Any thread: one Worker::HeldBlocks::Copy per pool. kInvalidArgument: a hold that names no
  // block of this worker's pools, or a buffer of another size; nothing is copied then.
  [[nodiscard]] Status CopyHeld(std::span<const uint64_t> holds,
                                std::span<const std::span<uint8_t>> outs) override;
  // Any thread: one Worker::HeldBlocks::Stage per pool, kept together until the
  // StagedBlocks goes. kInvalidArgument as CopyHeld's; the first pool's refusal
  // (kResourceExhausted: none to spare) stages none.
  [[nodiscard]] Result<std::unique_ptr<store::StagedBlocks>> StageHeld(
      std::span<const uint64_t> holds) override;
  // The blocks found are read pool by pool, one Worker::BlockBytes::ReadMany each (one gather on a
  // GPU).
  [[nodiscard]] std::vector<Result<storage::BlockHeader>> ReadBatch(
      std::span<const storage::BlockRef> refs, std::span<const std::span<uint8_t>> outs) override;

 private:
  struct Found {
    uint32_t pool_id;
    BlockId block;
    storage::BlockHeader header;
  };
  Result<Found> Find(const storage::BlockRef& ref) const;
  // Calls each(pool, blocks, positions) once per pool that `holds` name: blocks[j] is the
  // block of holds[positions[j]]. kInvalidArgument, calling nothing, where a hold names no
  // pool of the worker ("nothing was <nothing_was>"); else the first failing call's status.
  template <typename Each>
  Status ByHoldPool(std::span<const uint64_t> holds, std::string_view nothing_was, Each each) const;
  // Calls each(pool, blocks, positions) once per pool holding any block of `found`:
  // blocks[j] is the block at found[positions[j]].
  template <typename Each>
  void ByPool(const std::vector<std::optional<Found>>& found, Each each) const;

  Worker* worker_;
  std::vector<std::string> fingerprints_;  // each pool's layout's, by pool id: Find builds none
};

}  // namespace kvtier::worker
