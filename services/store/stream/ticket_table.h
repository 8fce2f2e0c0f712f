// TicketTable: the transfers a data stream has opened and not yet carried out, and its
// sessions (protocol.h's keyed gets and keyed puts).
//
// Each ticket gets a random 64-bit id and a 64-bit secret from the kernel's CSPRNG
// (getrandom), and is good for one Take() until `ttl` after it was added. A wrong secret
// is refused and costs the owner nothing: no one can cancel a ticket or session that it
// was not given, and guessing one means guessing 128 random bits. Expiry needs no scan: every
// ticket lives for the same `ttl`, so they expire in the order they were added and a
// queue of (deadline, id) is swept from its front on every Add and Take.
// A session (of gets or of puts) is good for any number of UseSession() calls and lives
// while it is used at least once per `ttl`; at most kMaxSessions are open (one or two
// per client connection is the expected use). Idle sessions are dropped by UseSession
// and Sweep.
//
// Thread safety: safe from any thread (one mutex; the control thread adds, the stream's
// thread takes). Ownership: tickets leave by Take (to the caller) or by expiry; a
// session is shared with the keyed gets using it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/block_key.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "services/store/stream/protocol.h"
#include "services/store/stream/source_holds.h"
#include "services/store/stream/staging_pool.h"
#include "services/store/stream/stream_session.h"
#include "storage/block_header.h"
#include "storage/host_tier.h"

namespace kvtier::store {

// One block of a get. A tier's block is found when the transfer is sent
// (`read_at_send`), on the stream's loop: sent from the host tier's pages where it is
// there (pinned until sent), else read into staging taken then; it holds no staging
// while the ticket waits. Another source's block (a worker's pool) is found at open:
// held in place by a keyed get where the source can hold it (a host pool), and then sent
// from the source's pages (`held`, until the transfer gives its hold back), or held apart
// (a GPU pool's) and sent from where the source staged it (`held` too); else copied into
// its slot of the transfer's `buffer`, at `offset`.
struct GetSlot {
  uint64_t offset = 0;  // !read_at_send, `held` empty: in `OpenTransfer::buffer`
  uint64_t bytes = 0;
  bool read_at_send = false;
  BlockKey key = {};    // read_at_send: the block, under the transfer's format tag and scope
  uint32_t header = 0;  // !read_at_send: its header in `OpenTransfer::headers`
  // !read_at_send: the source's pages, held by `source_holds`, or its staging (`staged_source`)
  std::span<const uint8_t> held = {};
};

struct OpenTransfer {
  StreamOp op = StreamOp::kGet;
  // get: the extra source's blocks copied at open (none: empty); put: total_bytes.
  StagingBuffer buffer;
  // keyed get: the extra source's holds on the blocks sent from its pages (GetSlot::held).
  SourceHolds source_holds;
  // keyed get: the extra source's staging of blocks it holds apart, sent from there
  // (GetSlot::held); kept until the transfer is sent or dropped, as the holds are.
  std::unique_ptr<StagedBlocks> staged_source;
  // get: each block's state (final once sent) and slot (for kPresent blocks).
  std::vector<StreamBlockState> states;
  std::vector<GetSlot> slots;
  std::string format_tag;  // get: of every block (BlockRef only views it)
  uint64_t salt_scope = 0;
  uint64_t payload_bytes = 0;  // get: of the blocks sent, once sent; put: received, once stored
  std::vector<storage::PinnedBlock> pinned;  // get: the host tier's blocks on the wire
  StagingBuffer read_at_send;                // get: the tiers' blocks not pinned, read when sent
  // put: the headers, in payload order; get: those of the extra source's blocks.
  std::vector<storage::BlockHeader> headers;
  // put: host-tier pages the payloads are read into, where the tier took the batch as new
  // blocks (else they are read into `buffer`).
  storage::HostReservation in_place;
};

class TicketTable {
 public:
  static constexpr size_t kMaxSessions = 65536;

  TicketTable(const Clock& clock, std::chrono::milliseconds ttl) : clock_(clock), ttl_(ttl) {}

  struct Added {
    uint64_t id = 0;
    uint64_t secret = 0;
  };
  // kUnavailable only if the kernel's random source fails.
  [[nodiscard]] Result<Added> Add(OpenTransfer transfer);

  // The transfer, removed from the table. kNotFound for an unknown or expired id,
  // kPermissionDenied for a wrong secret (the ticket stays its owner's),
  // kInvalidArgument when it was opened for the other operation.
  [[nodiscard]] Result<OpenTransfer> Take(uint64_t id, uint64_t secret, StreamOp op);

  // A session. kResourceExhausted when kMaxSessions are open; kUnavailable as Add.
  [[nodiscard]] Result<Added> AddSession(StreamSession session);
  // The session, for a transfer of `op`, its idle time reset. Errors as Take
  // (kInvalidArgument for a transfer's ticket or a session of the other operation); a
  // session idle for `ttl` is kNotFound.
  [[nodiscard]] Result<std::shared_ptr<const StreamSession>> UseSession(uint64_t id,
                                                                        uint64_t secret,
                                                                        StreamOp op);

  // Drops the expired tickets and idle sessions; returns how many.
  size_t Sweep();
  // Drops every ticket (a server shutting down).
  void Drop();
  size_t size() const;  // tickets, not sessions
  size_t sessions() const;
  uint64_t expired() const;  // tickets never used

 private:
  struct Entry {
    uint64_t secret = 0;
    OpenTransfer transfer;
  };
  struct SessionEntry {
    uint64_t secret = 0;
    std::shared_ptr<const StreamSession> session;
    Nanos last_used{};
  };
  size_t SweepLocked() KVTIER_REQUIRES(mu_);
  // A random id that no ticket or session has, and its secret.
  Result<Added> FreshIdLocked() const KVTIER_REQUIRES(mu_);

  const Clock& clock_;
  const std::chrono::milliseconds ttl_;
  mutable Mutex mu_;
  uint64_t expired_ KVTIER_GUARDED_BY(mu_) = 0;
  std::unordered_map<uint64_t, Entry> open_ KVTIER_GUARDED_BY(mu_);
  std::deque<std::pair<Nanos, uint64_t>> deadlines_ KVTIER_GUARDED_BY(mu_);  // in Add order
  std::unordered_map<uint64_t, SessionEntry> sessions_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier::store
