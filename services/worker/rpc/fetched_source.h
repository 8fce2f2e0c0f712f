// FetchedSource: the blocks a PeerFetcher brought (FetchedBlocks), as the source of a
// worker's second Onboard: in the fetch's buffer, or landed in pool blocks held for the
// fetch (Worker::HoldLanding's views). Onboard asks for each block where it goes: where
// that is the very place it landed, there is nothing to copy (kRemoteInPlace); elsewhere
// (a buffered fetch, or a sequence whose blocks changed during the fetch) it is copied
// there (kRemote).
//
// Thread safety: none; the worker's loop, as Onboard. Ownership: borrows the fetched
// blocks and the landing views, which outlive it.
#pragma once

#include <cstdint>
#include <span>

#include "services/worker/rpc/peer_fetcher.h"
#include "services/worker/worker.h"

namespace kvtier::worker {

class FetchedSource final : public OnboardSource {
 public:
  // `landed`: empty for a buffered fetch, else the fetch's land_in (one per key asked).
  FetchedSource(const FetchedBlocks& fetched, std::span<const std::span<uint8_t>> landed)
      : fetched_(fetched), landed_(landed) {}
  // kNotFound for a block the fetch did not bring (onboarding stops there).
  [[nodiscard]] Result<SourceTier> Fetch(const OnboardBlock& block) override;

 private:
  const FetchedBlocks& fetched_;
  const std::span<const std::span<uint8_t>> landed_;
  size_t next_ = 0;  // blocks are asked for in chain order
};

}  // namespace kvtier::worker
