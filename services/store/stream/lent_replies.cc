#include "services/store/stream/lent_replies.h"

#include <utility>

#include "services/store/stream/protocol.h"

namespace kvtier::store {

void LentReplies::Park(uint32_t number, std::vector<storage::PinnedBlock>& pins) {
  Reply& parked = ring_[(oldest_ + count_) % kMax];
  parked.number = number;
  std::swap(parked.pins, pins);
  ++count_;
}

void LentReplies::Release(uint32_t acked) {
  while (count_ > 0) {
    Reply& oldest = ring_[oldest_];
    // Read when `acked` is at or past its number (counting on from it, mod 2^31).
    if (((acked - oldest.number) & kStreamAckedMask) >= kStreamAcksReplies / 2) return;
    oldest.pins.clear();  // unpinned in place: the reader has its bytes
    oldest_ = (oldest_ + 1) % kMax;
    --count_;
  }
}

void LentReplies::UnpinAllLent() {
  for (; count_ > 0; --count_, oldest_ = (oldest_ + 1) % kMax) {
    for (storage::PinnedBlock& pin : ring_[oldest_].pins) pin.UnpinLent();
    ring_[oldest_].pins.clear();
  }
}

}  // namespace kvtier::store
