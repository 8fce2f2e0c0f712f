// The worker's block bytes outside sequences (worker.h: BlockBytes) and the held-block
// calls a peer transfer makes (HeldBlocks), beside the sequences of worker.cc.
#include "services/worker/worker.h"

#include "services/worker/worker_impl.h"

namespace kvtier::worker {

std::span<uint8_t> Worker::BlockBytes::Host(uint32_t pool_id) {
  return impl_->pools_.at(pool_id).storage->host_bytes();
}

namespace {

// The pool's state when `block` is one of its blocks and `bytes` one block's size.
Result<PoolState*> BlockAccess(Worker::Impl& w, const char* what, uint32_t pool_id, BlockId block,
                               size_t bytes) {
  KVTIER_ASSIGN_OR_RETURN(PoolState * state, w.Pool(pool_id));
  if (block >= state->pool->options().num_blocks || bytes != state->layout.bytes_per_block()) {
    return InvalidArgumentError(
        std::string(what) + ": block " + std::to_string(block) + " of pool " +
        std::to_string(pool_id) + " with " + std::to_string(bytes) +
        " bytes (blocks: " + std::to_string(state->pool->options().num_blocks) + " of " +
        std::to_string(state->layout.bytes_per_block()) + " bytes)");
  }
  return state;
}

}  // namespace

Status Worker::BlockBytes::Read(uint32_t pool_id, BlockId block, std::span<uint8_t> out) const {
  KVTIER_ASSIGN_OR_RETURN(PoolState * state,
                          BlockAccess(*impl_, "Read", pool_id, block, out.size()));
  return state->storage->Read(state->BlockOffset(block), out);
}

Status Worker::BlockBytes::ReadMany(uint32_t pool_id, std::span<const BlockId> blocks,
                                    std::span<const std::span<uint8_t>> outs) const {
  if (blocks.size() != outs.size()) return InvalidArgumentError("ReadMany: one buffer per block");
  if (blocks.empty()) return Status::Ok();
  PoolState* state = nullptr;
  for (size_t i = 0; i < blocks.size(); ++i) {
    KVTIER_ASSIGN_OR_RETURN(state,
                            BlockAccess(*impl_, "ReadMany", pool_id, blocks[i], outs[i].size()));
  }
  // As a copy of held blocks (on a GPU a copier's gathers, in rounds of its staging):
  // on this loop no one else writes them meanwhile. A gather reads each id once per
  // position, so repeats are harmless (only a scatter must not repeat a block).
  return state->storage->CopyHeld(blocks, state->layout.bytes_per_block(), outs);
}

Result<std::vector<std::span<const uint8_t>>> Worker::HeldBlocks::Hold(
    uint32_t pool_id, std::span<const BlockId> blocks) {
  KVTIER_ASSIGN_OR_RETURN(PoolState * state, impl_->Pool(pool_id));
  KVTIER_RETURN_IF_ERROR(state->pool->HoldBlocks(blocks));
  const std::span<const uint8_t> memory = state->storage->host_bytes();
  std::vector<std::span<const uint8_t>> views(blocks.size());  // a device pool's stay empty
  if (memory.empty()) return views;
  for (size_t i = 0; i < blocks.size(); ++i) {
    views[i] = memory.subspan(state->BlockOffset(blocks[i]), state->layout.bytes_per_block());
  }
  return views;
}

namespace {

// The pool of a call on held blocks (`call`), once each block is one of it. Reads only
// what Create set (the pools, their layouts and storage), never the bookkeeping: safe off
// the loop.
Result<const PoolState*> HeldPool(const std::vector<PoolState>& pools, const char* call,
                                  uint32_t pool_id, std::span<const BlockId> blocks) {
  if (pool_id >= pools.size())
    return InvalidArgumentError(std::string(call) + ": no pool " + std::to_string(pool_id));
  const PoolState& state = pools[pool_id];
  const size_t pool_blocks = state.storage->size() / state.layout.bytes_per_block();
  for (const BlockId block : blocks) {
    if (block >= pool_blocks) {
      return InvalidArgumentError(std::string(call) + ": block " + std::to_string(block) + " of " +
                                  std::to_string(pool_blocks));
    }
  }
  return &state;
}

// HeldPool for HeldBlocks::Copy and HeldBlocks::Land, once each buffer is one block.
template <typename Buffer>
Result<const PoolState*> HeldAccess(const std::vector<PoolState>& pools, const char* call,
                                    uint32_t pool_id, std::span<const BlockId> blocks,
                                    std::span<const Buffer> buffers) {
  KVTIER_ASSIGN_OR_RETURN(const PoolState* state, HeldPool(pools, call, pool_id, blocks));
  if (blocks.size() != buffers.size())
    return InvalidArgumentError(std::string(call) + ": one buffer per block");
  const size_t block_bytes = state->layout.bytes_per_block();
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (buffers[i].size() != block_bytes) {
      return InvalidArgumentError(std::string(call) + ": block " + std::to_string(blocks[i]) +
                                  " with " + std::to_string(buffers[i].size()) +
                                  " bytes (a block is " + std::to_string(block_bytes) + ")");
    }
  }
  return state;
}

}  // namespace

Status Worker::HeldBlocks::Copy(uint32_t pool_id, std::span<const BlockId> blocks,
                                std::span<const std::span<uint8_t>> outs) const {
  KVTIER_ASSIGN_OR_RETURN(const PoolState* state,
                          HeldAccess(impl_->pools_, "HeldBlocks::Copy", pool_id, blocks, outs));
  return state->storage->CopyHeld(blocks, state->layout.bytes_per_block(), outs);
}

Result<std::unique_ptr<StagedRead>> Worker::HeldBlocks::Stage(
    uint32_t pool_id, std::span<const BlockId> blocks) const {
  KVTIER_ASSIGN_OR_RETURN(const PoolState* state,
                          HeldPool(impl_->pools_, "HeldBlocks::Stage", pool_id, blocks));
  return state->storage->StageHeld(blocks, state->layout.bytes_per_block());
}

Status Worker::HeldBlocks::Land(uint32_t pool_id, std::span<const BlockId> blocks,
                                std::span<const std::span<const uint8_t>> ins) const {
  KVTIER_ASSIGN_OR_RETURN(const PoolState* state,
                          HeldAccess(impl_->pools_, "HeldBlocks::Land", pool_id, blocks, ins));
  std::vector<BlockId> sorted(blocks.begin(), blocks.end());
  std::ranges::sort(sorted);
  if (std::ranges::adjacent_find(sorted) != sorted.end()) {
    return InvalidArgumentError("HeldBlocks::Land: block " +
                                std::to_string(*std::ranges::adjacent_find(sorted)) +
                                " twice in one batch");
  }
  return state->storage->LandHeld(blocks, state->layout.bytes_per_block(), ins);
}

Result<LandingBlocks> Worker::HeldBlocks::HoldLanding(ClientId client, SequenceId sequence,
                                                      uint32_t max_blocks,
                                                      std::optional<uint32_t> pool_id) {
  Impl& w = *impl_;
  KVTIER_ASSIGN_OR_RETURN(auto found, w.FindPart(client, sequence, pool_id));
  const auto [seq, part] = found;
  PoolState& state = w.pools_[part->pool_id];
  const std::span<uint8_t> memory = state.storage->host_bytes();  // empty: a device pool
  KVTIER_ASSIGN_OR_RETURN(std::vector<BlockId> table, state.pool->BlockTable(part->internal));
  const uint32_t full_blocks = std::min<uint32_t>(static_cast<uint32_t>(table.size()),
                                                  seq->tokens / state.layout.tokens_per_block());
  LandingBlocks landing{.pool_id = part->pool_id, .first_block = part->filled_blocks};
  landing.blocks.reserve(
      std::min<uint32_t>(max_blocks, full_blocks));  // one allocation, however many blocks
  for (uint32_t b = part->filled_blocks;
       b < full_blocks && table[b] != kNoBlock && landing.blocks.size() < max_blocks; ++b) {
    landing.blocks.push_back(table[b]);
  }
  if (landing.blocks.empty()) {
    return FailedPreconditionError(Describe(client, sequence) +
                                   " has no blank full block after its first " +
                                   std::to_string(part->filled_blocks) + " in its window");
  }
  KVTIER_RETURN_IF_ERROR(state.pool->HoldForWriting(landing.blocks));
  if (!memory.empty()) {
    landing.views.reserve(landing.blocks.size());
    for (const BlockId b : landing.blocks) {
      landing.views.push_back(memory.subspan(state.BlockOffset(b), state.layout.bytes_per_block()));
    }
    return landing;
  }
  // A device pool's fetch writes into a copier's pinned staging where the landing fits
  // one; otherwise into a buffer of its own, landed by HeldBlocks::Land.
  Result<std::unique_ptr<StagedLanding>> staged =
      state.storage->StageLanding(landing.blocks, state.layout.bytes_per_block());
  if (staged.ok()) {
    landing.views = (*staged)->views();
    landing.staged = std::move(*staged);
  }
  return landing;
}

Status Worker::HeldBlocks::Release(uint32_t pool_id, std::span<const BlockId> blocks) {
  KVTIER_ASSIGN_OR_RETURN(PoolState * state, impl_->Pool(pool_id));
  return state->pool->ReleaseBlocks(blocks);
}

Status Worker::HeldBlocks::RememberChecksums(uint32_t pool_id, std::span<const BlockId> blocks,
                                             std::span<const uint64_t> checksums) {
  KVTIER_ASSIGN_OR_RETURN(PoolState * state, impl_->Pool(pool_id));
  return state->pool->RememberChecksums(blocks, checksums);
}

Status Worker::BlockBytes::Write(uint32_t pool_id, BlockId block, std::span<const uint8_t> in) {
  KVTIER_ASSIGN_OR_RETURN(PoolState * state,
                          BlockAccess(*impl_, "Write", pool_id, block, in.size()));
  return state->storage->Write(state->BlockOffset(block), in);
}

}  // namespace kvtier::worker
