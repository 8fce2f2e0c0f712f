#include "services/worker/rpc/peers/pool_block_source.h"

#include <optional>
#include <string>

#include "services/worker/tier_link.h"

namespace kvtier::worker {

PoolBlockSource::PoolBlockSource(Worker* worker) : worker_(worker) {
  for (uint32_t pool = 0; pool < worker_->pool_count(); ++pool) {
    fingerprints_.push_back(
        worker_->PoolLayout(pool).value().Fingerprint());  // a worker's pools are fixed
  }
}

Result<PoolBlockSource::Found> PoolBlockSource::Find(const storage::BlockRef& ref) const {
  for (uint32_t pool = 0; pool < worker_->pool_count(); ++pool) {
    KVTIER_ASSIGN_OR_RETURN(const std::optional<PoolHolding> holding,
                            worker_->held().FindCommitted(pool, ref.key));
    if (!holding || holding->salt_scope != ref.salt_scope) continue;
    if (!IsStorageFormatTag(ref.format_tag, fingerprints_[pool], holding->format_tag)) continue;
    KVTIER_ASSIGN_OR_RETURN(const KvLayout layout, worker_->PoolLayout(pool));
    storage::BlockHeader header;
    header.key = holding->key;
    header.parent = holding->parent;
    header.first_in_chain = holding->first;
    // The peer named the tag: interned within the process's bound.
    KVTIER_ASSIGN_OR_RETURN(header.format_tag, storage::FormatTag::Intern(ref.format_tag));
    header.salt_scope = holding->salt_scope;
    header.payload_bytes = layout.bytes_per_block();
    header.priority = holding->priority;
    header.checksum = holding->checksum;  // 0 until a reader that held it gave it back
    return Found{pool, holding->block, std::move(header)};
  }
  // A miss allocates nothing (a constant), as a tier's: a keyed get asks for blocks by the batch.
  static const std::string* const kMiss =
      MessageConstant("no pool holds the block in that format and scope");
  return Status::Constant(StatusCode::kNotFound, kMiss);
}

template <typename Each>
void PoolBlockSource::ByPool(const std::vector<std::optional<Found>>& found, Each each) const {
  for (uint32_t pool = 0; pool < worker_->pool_count(); ++pool) {
    std::vector<BlockId> blocks;
    std::vector<size_t> positions;
    blocks.reserve(found.size());  // one allocation each, however many blocks
    positions.reserve(found.size());
    for (size_t i = 0; i < found.size(); ++i) {
      if (!found[i] || found[i]->pool_id != pool) continue;
      blocks.push_back(found[i]->block);
      positions.push_back(i);
    }
    if (!blocks.empty())
      each(pool, std::span<const BlockId>(blocks), std::span<const size_t>(positions));
  }
}

template <typename Each>
Status PoolBlockSource::ByHoldPool(std::span<const uint64_t> holds, std::string_view nothing_was,
                                   Each each) const {
  for (const uint64_t hold : holds) {
    if (hold >> 32 >= worker_->pool_count()) {
      return InvalidArgumentError(
          "hold " + std::to_string(hold) + " names pool " + std::to_string(hold >> 32) + " of " +
          std::to_string(worker_->pool_count()) + "; nothing was " + std::string(nothing_was));
    }
  }
  for (uint32_t pool = 0; pool < worker_->pool_count(); ++pool) {
    std::vector<BlockId> blocks;
    std::vector<size_t> positions;
    blocks.reserve(holds.size());  // one allocation each, however many blocks
    positions.reserve(holds.size());
    for (size_t i = 0; i < holds.size(); ++i) {
      if (holds[i] >> 32 != pool) continue;
      blocks.push_back(static_cast<BlockId>(holds[i]));
      positions.push_back(i);
    }
    if (!blocks.empty())
      KVTIER_RETURN_IF_ERROR(each(pool, std::span<const BlockId>(blocks), positions));
  }
  return Status::Ok();
}

Result<storage::BlockHeader> PoolBlockSource::Peek(const storage::BlockRef& ref) {
  KVTIER_ASSIGN_OR_RETURN(Found found, Find(ref));
  return std::move(found.header);
}

Result<storage::BlockHeader> PoolBlockSource::Read(const storage::BlockRef& ref,
                                                   std::span<uint8_t> out) {
  KVTIER_ASSIGN_OR_RETURN(Found found, Find(ref));
  KVTIER_RETURN_IF_ERROR(worker_->bytes().Read(found.pool_id, found.block, out));
  return std::move(found.header);
}

std::vector<Result<store::HeldBlock>> PoolBlockSource::HoldBatch(
    std::span<const storage::BlockRef> refs) {
  std::vector<Result<store::HeldBlock>> results;
  results.reserve(refs.size());
  std::vector<std::optional<Found>> found(refs.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    Result<Found> f = Find(refs[i]);
    if (f.ok()) found[i] = std::move(*f);
    results.push_back(f.ok() ? Result<store::HeldBlock>(store::HeldBlock{}) : f.status());
  }
  ByPool(found, [&](uint32_t pool, std::span<const BlockId> blocks,
                    std::span<const size_t> positions) {
    // Blocks not held (HeldBlocks::Hold failed) go to ReadBatch, on the loop.
    const Result<std::vector<std::span<const uint8_t>>> held = worker_->held().Hold(pool, blocks);
    for (size_t j = 0; j < positions.size(); ++j) {
      store::HeldBlock& out = *results[positions[j]];
      out.header = std::move(found[positions[j]]->header);
      if (!held.ok()) continue;
      out.held = (*held)[j];
      out.held_apart = out.held.empty();  // a device pool's: CopyHeld
      out.hold = (uint64_t{pool} << 32) | blocks[j];
    }
  });
  return results;
}

Status PoolBlockSource::ReleaseBatch(std::span<const uint64_t> holds,
                                     std::span<const uint64_t> checksums) {
  if (!checksums.empty() && checksums.size() != holds.size()) {
    return InvalidArgumentError(std::to_string(checksums.size()) + " checksums for " +
                                std::to_string(holds.size()) + " holds; nothing was released");
  }
  return ByHoldPool(
      holds, "released",
      [&](uint32_t pool, std::span<const BlockId> blocks,
          const std::vector<size_t>& positions) -> Status {
        std::vector<uint64_t> computed;  // kept while the blocks are still held
        computed.reserve(positions.size());
        for (size_t i : positions) computed.push_back(checksums.empty() ? 0 : checksums[i]);
        KVTIER_RETURN_IF_ERROR(worker_->held().RememberChecksums(pool, blocks, computed));
        return worker_->held().Release(pool, blocks);
      });
}

Status PoolBlockSource::CopyHeld(std::span<const uint64_t> holds,
                                 std::span<const std::span<uint8_t>> outs) {
  if (holds.size() != outs.size()) {
    return InvalidArgumentError(std::to_string(outs.size()) + " buffers for " +
                                std::to_string(holds.size()) + " held blocks; nothing was copied");
  }
  return ByHoldPool(
      holds, "copied",
      [&](uint32_t pool, std::span<const BlockId> blocks, const std::vector<size_t>& positions) {
        std::vector<std::span<uint8_t>> pool_outs;
        pool_outs.reserve(positions.size());
        for (size_t i : positions) pool_outs.push_back(outs[i]);
        return worker_->held().Copy(pool, blocks, pool_outs);
      });
}

namespace {

// The staged reads of one StageHeld, a pool's each, and their views in the holds' order.
class StagedPoolBlocks final : public store::StagedBlocks {
 public:
  explicit StagedPoolBlocks(size_t holds) : views_(holds) {}
  std::span<const std::span<const uint8_t>> views() const override { return views_; }
  // A pool's staged read, its j-th view that of holds[positions[j]].
  void Add(std::unique_ptr<StagedRead> read, std::span<const size_t> positions) {
    for (size_t j = 0; j < positions.size(); ++j) views_[positions[j]] = read->views()[j];
    reads_.push_back(std::move(read));
  }

 private:
  std::vector<std::span<const uint8_t>> views_;
  std::vector<std::unique_ptr<StagedRead>> reads_;
};

}  // namespace

Result<std::unique_ptr<store::StagedBlocks>> PoolBlockSource::StageHeld(
    std::span<const uint64_t> holds) {
  auto staged = std::make_unique<StagedPoolBlocks>(holds.size());
  KVTIER_RETURN_IF_ERROR(ByHoldPool(holds, "staged",
                                    [&](uint32_t pool, std::span<const BlockId> blocks,
                                        const std::vector<size_t>& positions) -> Status {
                                      KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<StagedRead> read,
                                                              worker_->held().Stage(pool, blocks));
                                      staged->Add(std::move(read), positions);
                                      return Status::Ok();
                                    }));
  return std::unique_ptr<store::StagedBlocks>(std::move(staged));
}

std::vector<Result<storage::BlockHeader>> PoolBlockSource::ReadBatch(
    std::span<const storage::BlockRef> refs, std::span<const std::span<uint8_t>> outs) {
  std::vector<Result<storage::BlockHeader>> results;
  results.reserve(refs.size());
  std::vector<std::optional<Found>> found(refs.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    Result<Found> f = Find(refs[i]);
    if (f.ok() && f->header.payload_bytes != outs[i].size()) {
      f = InvalidArgumentError("a buffer of " + std::to_string(outs[i].size()) +
                               " bytes for block " + refs[i].key.ToHex() + " of " +
                               std::to_string(f->header.payload_bytes));
    }
    if (f.ok()) found[i] = std::move(*f);
    results.push_back(f.ok() ? Result<storage::BlockHeader>(storage::BlockHeader{}) : f.status());
  }
  ByPool(found,
         [&](uint32_t pool, std::span<const BlockId> blocks, std::span<const size_t> positions) {
           std::vector<std::span<uint8_t>> pool_outs;
           pool_outs.reserve(positions.size());
           for (size_t i : positions) pool_outs.push_back(outs[i]);
           const Status read = worker_->bytes().ReadMany(pool, blocks, pool_outs);
           for (size_t i : positions) {
             if (!read.ok()) {
               results[i] = read;
               continue;
             }
             results[i] = std::move(found[i]->header);
           }
         });
  return results;
}

}  // namespace kvtier::worker
