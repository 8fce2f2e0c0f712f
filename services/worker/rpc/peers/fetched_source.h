// FetchedSource: the blocks a PeerFetcher brought (FetchedBlocks), as the source of a
// worker's second Onboard: in the fetch's buffer, or landed in pool blocks held for the
// fetch (Worker::HeldBlocks::HoldLanding: a host pool's written through its views, a device pool's
// written into staging, or buffered, and landed by the fetch's `land`). Onboard asks for
// each block where it goes: where that is the very
// block it landed in, there is nothing to copy (kRemoteInPlace); elsewhere (a buffered
// fetch, a device pool's landing that failed, or a sequence whose blocks changed during
// the fetch) it is copied there (kRemote).
//
// Thread safety: none; the worker's loop, as Onboard. Ownership: borrows the fetched
// blocks and the landing, which outlive it.
#pragma once

#include <cstdint>
#include <span>

#include "services/worker/rpc/peers/peer_fetcher.h"
#include "services/worker/worker.h"

namespace kvtier::worker {

class FetchedSource final : public OnboardSource {
 public:
  // `landing`: null for a buffered fetch, else the blocks held for it (one per key asked).
  FetchedSource(const FetchedBlocks& fetched, const LandingBlocks* landing)
      : fetched_(fetched), landing_(landing) {}
  // kNotFound for a block the fetch did not bring (onboarding stops there).
  [[nodiscard]] Result<SourceTier> Fetch(const OnboardBlock& block) override;

 private:
  // Whether the i-th block fetched is in the pool block `block` already.
  bool InPlace(size_t i, BlockId block) const;

  const FetchedBlocks& fetched_;
  const LandingBlocks* const landing_;
  size_t next_ = 0;  // blocks are asked for in chain order
};

}  // namespace kvtier::worker
