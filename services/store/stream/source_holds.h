// SourceHolds: the holds an ExtraBlockSource gave a get (HoldBatch) and that the get has
// not yet given back, each given back once: by Release(), or when the object is
// destroyed. A keyed get sends a host pool's held blocks straight from the pool's pages,
// so its holds live as long as its transfer (OpenTransfer::source_holds): given back once
// the reply is sent, or when the transfer is dropped (a client gone mid-send, a node
// shutting down). Internal to services/store/stream.
//
// Release() calls the source's ReleaseBatch on the calling thread: through a
// LoopBoundBlockSource, that is a hop to the source's loop, waited for. The stream
// gives a sent transfer's holds back from its tier pool, off its loops; only a dropped
// transfer's are given back on whichever thread drops it. A failed release is logged
// (the blocks stay unevictable until their node restarts, nothing worse); kUnavailable
// (the source's loop has exited) is not.
//
// Thread safety: none (one owner at a time); the source's ReleaseBatch is as safe as the
// source is. Ownership: shares the source, or borrows one that outlives this object (a
// get that copies the held blocks and gives them back before it returns).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common/vector_growth.h"
#include "services/store/extra_block_source.h"

namespace kvtier::store {

class SourceHolds {
 public:
  SourceHolds() = default;
  explicit SourceHolds(std::shared_ptr<ExtraBlockSource> source)
      : source_(source.get()), owner_(std::move(source)) {}
  // REQUIRES: `source` outlives this object.
  explicit SourceHolds(ExtraBlockSource& source) : source_(&source) {}
  SourceHolds(SourceHolds&& other) noexcept
      : source_(std::exchange(other.source_, nullptr)),
        owner_(std::move(other.owner_)),
        holds_(std::exchange(other.holds_, {})),
        checksums_(std::exchange(other.checksums_, {})) {}
  // Gives this object's own holds back first.
  SourceHolds& operator=(SourceHolds&& other) noexcept;
  SourceHolds(const SourceHolds&) = delete;
  SourceHolds& operator=(const SourceHolds&) = delete;
  ~SourceHolds() { Release(); }

  // REQUIRES: constructed with a source, which gave `hold`. Returns its index.
  size_t Add(uint64_t hold) {
    holds_.push_back(hold);
    checksums_.push_back(0);
    return holds_.size() - 1;
  }
  // Room for `more` holds beyond those held: Add allocates nothing for them.
  void Reserve(size_t more) {
    GrowFor(holds_, more);
    GrowFor(checksums_, more);
  }
  // The XXH3 computed of hold `index`'s bytes, given back with it for the source to keep.
  void Computed(size_t index, uint64_t checksum) { checksums_[index] = checksum; }
  bool empty() const { return holds_.empty(); }
  // Gives every hold back, with the checksums computed, by one ReleaseBatch; none are left.
  void Release();

 private:
  ExtraBlockSource* source_ = nullptr;
  std::shared_ptr<ExtraBlockSource> owner_;  // where shared: keeps `source_` alive
  std::vector<uint64_t> holds_;
  std::vector<uint64_t> checksums_;  // one per hold; 0: none computed
};

}  // namespace kvtier::store
