// LandingHold: a sequence's blank pool blocks held while a peer fetch writes their bytes
// in place on a fetcher thread (Worker::HeldBlocks::HoldLanding), given back on the worker's event
// loop once neither the onboard call that asked for the fetch nor the fetch itself needs
// them. The fetch keeps a share until its last write (PeerFetchRequest::keep), so a call
// cancelled mid-fetch (its client gone) never lets the blocks be handed out while bytes
// still land in them.
//
// A host pool's fetch writes the blocks' bytes through their views; a device pool's writes
// into a copier's pinned staging and scatters it once fetched, on the fetch's thread
// (PeerFetchRequest::land), or, where the pool staged none for it (too large, or too
// many landings at once), lands its buffered run by Land.
//
// Thread safety: Take and Direct on the worker's loop; Land on any thread. The last share
// may go on any thread: on the loop the holds are given back at once (and a staged
// landing's copier to its pool); elsewhere the thread waits for the loop to give
// them back (kj::Executor::executeSync), or gives nothing back once the loop has exited
// (the worker goes with it). A thread dropping it must hold nothing the loop waits for.
// Ownership: shared; borrows the worker, whose loop outlives every share but the fetch's
// (which sees the loop gone).
#pragma once

#include <memory>
#include <optional>

#include <kj/async.h>

#include "common/status.h"
#include "services/worker/rpc/peers/peer_fetcher.h"
#include "services/worker/worker.h"

namespace kvtier::worker {

class LandingHold {
 public:
  // The sequence's next blank blocks in `pool_id` (nullopt: its first pool), up to
  // `max_blocks`, held (Worker::HeldBlocks::HoldLanding's errors: no such sequence or block).
  [[nodiscard]] static Result<std::shared_ptr<LandingHold>> Take(
      Worker& worker, ClientId client, SequenceId sequence, uint32_t max_blocks,
      std::optional<uint32_t> pool_id = {});
  LandingHold(Worker& worker, LandingBlocks blocks, kj::Own<const kj::Executor> loop)
      : worker_(worker), blocks_(std::move(blocks)), loop_(kj::mv(loop)) {}
  ~LandingHold() noexcept;
  LandingHold(const LandingHold&) = delete;
  LandingHold& operator=(const LandingHold&) = delete;

  const LandingBlocks& blocks() const { return blocks_; }
  // Points `request` at the blocks `hold` holds: its keys cut to as many; its land_in (a
  // host pool's views, or a device pool's staging) and, for a device pool, its land (the
  // staging's Commit, or Land where the landing had no staging); a share of `hold` as
  // its keep. REQUIRES: request.keys start at the hold's first block.
  static void Direct(const std::shared_ptr<LandingHold>& hold, PeerFetchRequest& request);
  // The fetched run (fetched.keys, in fetched.bytes) into the first of these blocks, one
  // scatter on a device pool (Worker::HeldBlocks::Land), on the calling thread.
  // kInvalidArgument: more blocks fetched than held, or bytes that are not the run's.
  [[nodiscard]] Status Land(const FetchedBlocks& fetched) const;

 private:
  Worker& worker_;
  const LandingBlocks blocks_;
  const kj::Own<const kj::Executor> loop_;
};

}  // namespace kvtier::worker
