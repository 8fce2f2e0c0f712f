// LentReplies: a data stream connection's keyed-get replies whose host-tier pages went to
// the kernel by reference (SpliceWriter) and whose reader has not yet said it read them
// (protocol.h: acks), oldest first. Their pins hold the pages unchanged until then.
// Internal to services/store/stream.
//
// Thread safety: none; the connection's loop. Ownership: owns the parked pins.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "storage/host_tier.h"

namespace kvtier::store {

class LentReplies {
 public:
  // Two are enough for a client two gets deep; while all are taken, replies are copied.
  static constexpr size_t kMax = 4;

  bool empty() const { return count_ == 0; }
  bool full() const { return count_ == kMax; }
  size_t size() const { return count_; }

  // Parks `pins` (taken, the vector left empty) as reply `number` (mod 2^31, counted as
  // the reader counts the replies it read). REQUIRES: !full().
  void Park(uint32_t number, std::vector<storage::PinnedBlock>& pins);
  // The replies the reader has read whole: every one numbered `acked` or before (mod
  // 2^31, within half the range), unpinned in place, oldest first.
  void Release(uint32_t acked);
  // Every parked reply unpinned lent (its reader may never read it: the tier replaces the
  // pages' memory before it writes them again).
  void UnpinAllLent();

 private:
  struct Reply {
    uint32_t number = 0;
    std::vector<storage::PinnedBlock> pins;
  };
  std::array<Reply, kMax> ring_;
  size_t oldest_ = 0, count_ = 0;
};

}  // namespace kvtier::store
