// PoolSource: blocks outside a node's tiers (as a worker's pool), for the data stream's
// keyed-get tests: it holds blocks in place or apart, copies or stages those held apart,
// can fail or wait where a test asks it to, and records each call.
//
// Thread safety: safe from any thread, as a session's source must be (one mutex).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <vector>

#include "common/mutex.h"
#include "services/store/extra_block_source.h"
#include "storage/testing/blocks.h"

namespace kvtier::store {

// What a PoolSource does besides answering its blocks (keys' `lo` name them).
struct PoolSourceOptions {
  uint64_t gone = 0;                    // evicted between HoldBatch and ReadBatch
  uint64_t corrupt = 0;                 // fails its read
  std::vector<uint64_t> holdable = {};  // held by HoldBatch (a host pool's), bytes in place
  std::vector<uint64_t> held_apart =
      {};                            // held by HoldBatch apart (a GPU pool's): CopyHeld copies them
  Status copy_fails = Status::Ok();  // what CopyHeld answers, where not OK (nothing copied)
  bool stages =
      false;  // StageHeld stages held-apart blocks (else: none to spare, kResourceExhausted)
  bool stages_short =
      false;  // with `stages`: each view a byte short of its block (a source at fault)
  bool reads_wait = false;       // a ReadBatch waits (up to 5 s) until reads().Open(): a busy loop
  bool releases_wait = false;    // likewise a ReleaseBatch, until releases().Open()
  bool keeps_checksums = false;  // a checksum given back with a hold is its header's from then on
};

// Where a call of a PoolSource waits, when it must, until the test opens it.
class Gate {
 public:
  explicit Gate(bool closed) : closed_(closed) {}
  // Waits (up to 5 s) while closed; a call that passes an open gate does not wait.
  void Pass() {
    MutexLock lock(mu_);
    if (!closed_) return;
    waiting_ = true;
    changed_.NotifyAll();
    changed_.WaitFor(lock, std::chrono::seconds(5),
                     [&]() KVTIER_REQUIRES(mu_) { return !closed_; });
    waiting_ = false;
  }
  // Whether a call waits here now; WaitForCall waits (bounded) until one does.
  bool waiting() const {
    MutexLock lock(mu_);
    return waiting_;
  }
  bool WaitForCall() {
    MutexLock lock(mu_);
    return changed_.WaitFor(lock, std::chrono::seconds(5),
                            [&]() KVTIER_REQUIRES(mu_) { return waiting_; });
  }
  void Open() {
    MutexLock lock(mu_);
    closed_ = false;
    changed_.NotifyAll();
  }

 private:
  mutable Mutex mu_;
  CondVar changed_;
  bool closed_ KVTIER_GUARDED_BY(mu_);
  bool waiting_ KVTIER_GUARDED_BY(mu_) = false;
};

// Blocks outside the tiers (a worker's pool), thread-safe as a session's source must be.
class PoolSource final : public ExtraBlockSource {
 public:
  using TestBlock = storage::testing::TestBlock;

  explicit PoolSource(std::vector<TestBlock> blocks, PoolSourceOptions options = {})
      : blocks_(std::move(blocks)),
        options_(std::move(options)),
        reads_(options_.reads_wait),
        releases_(options_.releases_wait) {}
  Result<storage::BlockHeader> Peek(const storage::BlockRef& ref) override {
    KVTIER_ASSIGN_OR_RETURN(const TestBlock* block, Find(ref));
    storage::BlockHeader header = block->header;
    MutexLock lock(mu_);
    const auto kept = kept_checksums_.find(ref.key.lo);
    header.checksum =
        kept != kept_checksums_.end() ? kept->second : 0;  // as a pool's Peek: computed by a reader
    return header;
  }
  Result<storage::BlockHeader> Read(const storage::BlockRef& ref, std::span<uint8_t> out) override {
    KVTIER_ASSIGN_OR_RETURN(const TestBlock* block, Find(ref));
    if (ref.key.lo == options_.gone) return NotFoundError("evicted since Peek");
    if (ref.key.lo == options_.corrupt) return DataLossError("block failed its checksum");
    std::copy(block->payload.begin(), block->payload.end(), out.begin());
    storage::BlockHeader header = block->header;
    header.checksum = 0;  // as a pool's Read: the server hashes the bytes
    return header;
  }
  std::vector<Result<HeldBlock>> HoldBatch(std::span<const storage::BlockRef> refs) override {
    std::vector<Result<HeldBlock>> found = ExtraBlockSource::HoldBatch(refs);
    MutexLock lock(mu_);
    hold_batches_.push_back(refs.size());
    for (size_t i = 0; i < refs.size(); ++i) {
      if (!found[i].ok()) continue;
      const bool apart = std::ranges::count(options_.held_apart, refs[i].key.lo) > 0;
      if (!apart && std::ranges::count(options_.holdable, refs[i].key.lo) == 0) continue;
      if (!apart) found[i]->held = Find(refs[i]).value()->payload;
      found[i]->held_apart = apart;
      found[i]->hold = refs[i].key.lo;
      ++holds_out_;
    }
    return found;
  }
  Status CopyHeld(std::span<const uint64_t> holds,
                  std::span<const std::span<uint8_t>> outs) override {
    {
      MutexLock lock(mu_);
      copy_batches_.push_back(holds.size());
      EXPECT_GT(holds_out_, 0) << "copied while held";
    }
    if (!options_.copy_fails.ok()) return options_.copy_fails;
    for (size_t i = 0; i < holds.size(); ++i) {
      const std::vector<uint8_t>& payload = Find(RefOf(holds[i])).value()->payload;
      std::copy(payload.begin(), payload.end(), outs[i].begin());
    }
    return Status::Ok();
  }
  Result<std::unique_ptr<StagedBlocks>> StageHeld(std::span<const uint64_t> holds) override {
    {
      MutexLock lock(mu_);
      stage_batches_.push_back(holds.size());
      EXPECT_GT(holds_out_, 0) << "staged while held";
      if (!options_.stages) return ResourceExhaustedError("no copier to spare");
      ++staged_out_;
    }
    auto staged = std::make_unique<Staged>(*this);
    for (const uint64_t hold : holds) {
      const TestBlock& block = *Find(RefOf(hold)).value();
      staged->copies.push_back(block.payload);  // a staging of its own, as a copier's
      if (options_.stages_short) staged->copies.back().pop_back();
    }
    for (const std::vector<uint8_t>& copy : staged->copies) staged->spans.emplace_back(copy);
    return std::unique_ptr<StagedBlocks>(std::move(staged));
  }
  Status ReleaseBatch(std::span<const uint64_t> holds,
                      std::span<const uint64_t> checksums) override {
    releases_.Pass();
    MutexLock lock(mu_);
    released_.insert(released_.end(), holds.begin(), holds.end());
    EXPECT_EQ(checksums.size(), holds.size());
    for (size_t i = 0; i < holds.size() && i < checksums.size(); ++i) {
      given_checksums_.push_back(checksums[i]);
      if (options_.keeps_checksums && checksums[i] != 0) kept_checksums_[holds[i]] = checksums[i];
    }
    holds_out_ -= static_cast<int>(holds.size());
    return Status::Ok();
  }
  std::vector<Result<storage::BlockHeader>> ReadBatch(
      std::span<const storage::BlockRef> refs, std::span<const std::span<uint8_t>> outs) override {
    {
      MutexLock lock(mu_);
      read_batches_.push_back(refs.size());
    }
    reads_.Pass();
    return ExtraBlockSource::ReadBatch(refs, outs);
  }
  // Blocks per CopyHeld call, in order; likewise per StageHeld call (staged or not), and
  // the StagedBlocks alive.
  std::vector<size_t> copy_batches() const {
    MutexLock lock(mu_);
    return copy_batches_;
  }
  std::vector<size_t> stage_batches() const {
    MutexLock lock(mu_);
    return stage_batches_;
  }
  int staged_out() const {
    MutexLock lock(mu_);
    return staged_out_;
  }
  // Blocks per HoldBatch and per ReadBatch call, in order.
  std::vector<size_t> hold_batches() const {
    MutexLock lock(mu_);
    return hold_batches_;
  }
  std::vector<size_t> read_batches() const {
    MutexLock lock(mu_);
    return read_batches_;
  }
  // Holds given back, in order; holds taken and not yet given back.
  std::vector<uint64_t> released() const {
    MutexLock lock(mu_);
    return released_;
  }
  int holds_out() const {
    MutexLock lock(mu_);
    return holds_out_;
  }
  // The checksums given back with the holds, in order (0: not computed).
  std::vector<uint64_t> given_checksums() const {
    MutexLock lock(mu_);
    return given_checksums_;
  }
  // reads_wait, releases_wait: where ReadBatch and ReleaseBatch wait.
  Gate& reads() { return reads_; }
  Gate& releases() { return releases_; }

 private:
  // Copies of the blocks staged, counted out while alive.
  struct Staged final : StagedBlocks {
    explicit Staged(PoolSource& source) : source(source) {}
    ~Staged() override {
      MutexLock lock(source.mu_);
      --source.staged_out_;
    }
    std::span<const std::span<const uint8_t>> views() const override { return spans; }
    PoolSource& source;
    std::vector<std::vector<uint8_t>> copies;
    std::vector<std::span<const uint8_t>> spans;
  };

  // The block a hold names (its key's `lo`).
  static storage::BlockRef RefOf(uint64_t hold) {
    return {storage::testing::MakeBlock(hold, 1).header.key, storage::testing::kFormat,
            storage::testing::kScope};
  }
  Result<const TestBlock*> Find(const storage::BlockRef& ref) const {
    for (const TestBlock& b : blocks_) {
      if (b.ref().key == ref.key && b.ref().salt_scope == ref.salt_scope &&
          b.ref().format_tag == ref.format_tag) {
        return &b;
      }
    }
    return NotFoundError("not held");
  }
  const std::vector<TestBlock> blocks_;
  const PoolSourceOptions options_;
  Gate reads_, releases_;
  mutable Mutex mu_;
  std::vector<size_t> hold_batches_ KVTIER_GUARDED_BY(mu_);
  std::vector<size_t> read_batches_ KVTIER_GUARDED_BY(mu_);
  std::vector<size_t> copy_batches_ KVTIER_GUARDED_BY(mu_);
  std::vector<size_t> stage_batches_ KVTIER_GUARDED_BY(mu_);
  std::vector<uint64_t> released_ KVTIER_GUARDED_BY(mu_);
  std::vector<uint64_t> given_checksums_ KVTIER_GUARDED_BY(mu_);
  std::map<uint64_t, uint64_t> kept_checksums_ KVTIER_GUARDED_BY(mu_);  // by hold (the key's `lo`)
  int holds_out_ KVTIER_GUARDED_BY(mu_) = 0;
  int staged_out_ KVTIER_GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::store
