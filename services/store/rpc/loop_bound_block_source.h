// LoopBoundBlockSource: an ExtraBlockSource that must be read on one KJ event loop's
// thread (a worker's pool, which lives on the node's RPC loop), made callable from any
// thread: each call runs on that loop (kj::Executor::executeSync) while the calling
// thread waits. The data stream's keyed gets read a worker's pool through it, from the
// stream's threads.
//
// Each call is one hop to the loop and back (an eventfd wake-up, some microseconds): a
// caller reading many blocks uses the batches, which hop once each. A source that holds
// blocks (HoldBatch: a worker's pool) leaves their copy to the caller's thread, so the
// loop is held only to find and to release them: CopyHeld and StageHeld run on the
// caller's thread, never on the loop.
// Once the loop has exited, every call answers kUnavailable (per block, for the batches)
// without touching the source: a keyed get then finds the blocks missing.
//
// Thread safety: safe from any thread (on the loop's own, a call runs inline). A caller
// must hold nothing the loop may wait for (a lock it takes, a thread it joins): the call
// waits until the loop has run it.
// Ownership: shared (the sessions whose keyed gets read it). It keeps the loop's
// Executor alive, not the loop; `source` must outlive the loop (it is used there) and
// every thread that holds its blocks (CopyHeld uses it there: a node destroys its data
// stream, whose threads read sources, before its worker).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include <kj/async.h>

#include "common/status.h"
#include "services/store/extra_block_source.h"

namespace kvtier::store {

class LoopBoundBlockSource final : public ExtraBlockSource {
 public:
  // Binds `source` to the calling thread's event loop. kFailedPrecondition when this
  // thread runs no KJ event loop; kInvalidArgument for a null source.
  [[nodiscard]] static Result<std::shared_ptr<LoopBoundBlockSource>> Create(
      ExtraBlockSource* source);

  [[nodiscard]] Result<storage::BlockHeader> Peek(const storage::BlockRef& ref) override;
  [[nodiscard]] Result<storage::BlockHeader> Read(const storage::BlockRef& ref,
                                                  std::span<uint8_t> out) override;
  [[nodiscard]] std::vector<Result<HeldBlock>> HoldBatch(
      std::span<const storage::BlockRef> refs) override;
  [[nodiscard]] Status ReleaseBatch(std::span<const uint64_t> holds,
                                    std::span<const uint64_t> checksums) override;
  // On the calling thread: the source's CopyHeld is safe from any.
  [[nodiscard]] Status CopyHeld(std::span<const uint64_t> holds,
                                std::span<const std::span<uint8_t>> outs) override {
    return source_->CopyHeld(holds, outs);
  }
  // Likewise.
  [[nodiscard]] Result<std::unique_ptr<StagedBlocks>> StageHeld(
      std::span<const uint64_t> holds) override {
    return source_->StageHeld(holds);
  }
  [[nodiscard]] std::vector<Result<storage::BlockHeader>> ReadBatch(
      std::span<const storage::BlockRef> refs, std::span<const std::span<uint8_t>> outs) override;

  LoopBoundBlockSource(ExtraBlockSource* source, kj::Own<const kj::Executor> loop)
      : source_(source), loop_(kj::mv(loop)) {}
  // As its base's: dropping the executor's reference throws nothing.
  ~LoopBoundBlockSource() noexcept override = default;

 private:
  // `call()` on the loop; the loop's absence as kUnavailable.
  template <typename Call>
  Result<std::invoke_result_t<Call>> OnLoop(Call call) const;

  ExtraBlockSource* const source_;
  const kj::Own<const kj::Executor> loop_;
};

}  // namespace kvtier::store
