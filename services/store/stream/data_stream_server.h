// DataStreamServer: a node's data stream (protocol.h), the bulk path of its BlockStore.
//
// OpenGet/OpenPut are called by the BlockStore capability once it has checked the
// session (salt scope) and the request; they answer a ticket, and the bytes then move on
// this server's TCP listener:
// - get: OpenGet looks every block up. A block of the extra source (a worker's pool) is
//   copied at once into staging, on the caller's thread, where that source may be read.
//   The tiers' blocks hold nothing while the ticket waits: they are found again when the
//   transfer is sent, on the connection's loop. A block the host tier holds is pinned
//   there and the write gathers straight from its pages (no copy on the node); one that
//   has gone down to disk is read into staging taken then (checksum-verified). A block
//   OpenGet answered present but that was evicted or found corrupt in the meantime is
//   sent as missing or corrupt: the states the stream sends are final.
// - keyed get: a get session (OpenSession) lets a client name a get's blocks on the
//   stream itself, with no OpenGet per transfer; its blocks are found on the loop (or the
//   tier pool) and served as a get of the tiers' blocks. Those the tiers lack are found
//   in the session's extra source where it has one (a worker's pool), on the tier pool
//   (the call waits for the loop serving that source): a block the source holds in place
//   (a host pool's) is sent from the source's pages, held until its reply is sent (or
//   the transfer dropped); one held apart (a GPU pool's) is sent from where the source
//   staged it (a copier's pinned staging, kept as long), or where it stages none copied
//   (on the tier pool); the others are read into staging.
// - keyed put: a put session (OpenSession) lets a client send a put's headers on the
//   stream itself, with no OpenPut per transfer; the headers are checked as OpenPut
//   checks them, on the loop, and the put then goes on as a ticket's.
// - put: where the host tier takes the batch as new blocks, the payloads are read from
//   the socket straight into pages it reserves for them (TieredStore::HostPages::Reserve: no
//   copy on the node); else (a block stored already, no host tier, no room, or
//   reservations holding half the tier already: HostTier::Reserve) into the
//   staging buffer, stored by PutBatch. Either way every block is checked against its
//   header (size, XXH3) and the batch is stored only when all pass; nothing of a
//   refused, truncated or abandoned transfer is stored. The open still takes the put's
//   staging, which bounds the puts in flight either way.
// Staging is bounded (StagingPool, `max_staged_bytes`): an open beyond it answers
// kResourceExhausted, and so does a get's send whose blocks left host memory since the
// open and do not fit (refused before any byte is sent; the client may retry). A ticket
// not used within `ticket_ttl` expires and frees its staging; a client that disconnects
// mid-transfer frees its at once.
//
// Thread safety: Create() starts `threads` threads, each running an asio::io_context of
// its own; each connection lives on one of them (dealt round-robin), so transfers of
// different clients run in parallel: one loop's sending thread was the bottleneck of a 16-core
// machine's gets
// (docs/history/benchmarks-2026-11.md#several-stream-loops-and-a-machine-with-cores-to-spare-2026-11-23).
// Where the store has a disk tier, tier work that may wait for the disk runs on a pool of
// `tier_threads` (an asio::thread_pool) and hands the transfer back to its loop when done: a disk
// read or a demotion never stalls the other connections of a loop. The ticket table and the staging
// pool are shared (each locks itself; see ticket_table.h, staging_pool.h), and so is the store
// (safe from any thread). OpenGet/OpenPut/OpenSession/Stats are safe from any thread. Ownership:
// the store (and the extra source passed to OpenGet) outlive the server.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/tls_context.h"
#include "services/store/extra_block_source.h"
#include "services/store/stream/protocol.h"
#include "services/store/stream/stream_session.h"
#include "storage/tiered_store.h"

namespace kvtier::store {

struct DataStreamServerOptions {
  storage::TieredStore* store = nullptr;  // required
  std::string bind_host = "127.0.0.1";
  uint16_t port = 0;                // 0: a free port (see address())
  std::string advertise_host = {};  // how other nodes reach bind_host; empty: bind_host
  uint64_t max_staged_bytes = 1ull << 30;
  uint64_t max_block_bytes = 256ull << 20;
  std::chrono::milliseconds ticket_ttl{30'000};
  std::chrono::milliseconds client_timeout{10'000};  // a transfer stalled this long is cut off
  uint32_t threads = 0;  // event loops serving connections; 0: hardware threads / 2, 2 to 8
  // Threads that run the transfers' work that may wait: tier work where the store has a
  // disk tier (reads of blocks not in host memory, puts that may write or demote to disk)
  // and keyed gets' reads of a session's extra source, so that no event loop waits for a
  // disk or another loop. 0: as many as loops.
  uint32_t tier_threads = 0;
  // Keyed gets of node sessions (a node's credential) whose clients ack (protocol.h) send
  // the blocks that the host tier holds zero copy: their pages spliced into the socket
  // (stream/splice_writer.h), where the host tier can lend them (a slab neither pinned
  // for DMA nor of explicit huge pages). They stay pinned until the client acks them;
  // after `lent_grace` idle without an ack they are unpinned lent, and the tier replaces
  // their memory before it writes them again (a page fault per 4 KiB for that put).
  // Tenants' sessions, ticket gets and lend_pages false: copied into the socket.
  bool lend_pages = true;
  std::chrono::milliseconds lent_grace{100};
  // Connections that have shown no valid ticket or session yet are "unproven": closed after
  // `first_request_deadline` (the RPC's authentication deadline), shed (oldest first) for a
  // newcomer when `max_connections` are open, and refused past `max_unproven_per_address` from one
  // address. 0: a quarter of the process's descriptor limit, so that a flood leaves descriptors to
  // the rest of it.
  uint32_t max_connections = 0;
  uint32_t max_unproven_per_address = 64;
  std::chrono::milliseconds first_request_deadline{5'000};
  // Set (common/tls_context.h, a server context): every connection is TLS, its handshake
  // within `first_request_deadline`; replies are copied, never lent (lend_pages is off).
  TlsContextPtr tls = nullptr;
  const Clock* clock = &SystemClock::Instance();
  MetricsRegistry* registry = nullptr;  // optional: stream_metrics.h; outlives the server
};

struct StreamGetOpened {
  TransferTicket ticket;
  // Per requested block: its state (kCorrupt: failed its checksum, deleted) and, when
  // kPresent, its header.
  std::vector<StreamBlockState> states;
  std::vector<std::optional<storage::BlockHeader>> headers;
};

struct DataStreamStats {
  uint64_t tickets_open = 0;
  uint64_t staged_bytes = 0;
  uint64_t gets = 0, puts = 0;  // transfers completed
  uint64_t bytes_sent = 0, bytes_received = 0;
  uint64_t bytes_lent = 0;           // of bytes_sent: spliced from the host tier's pages
  uint64_t refused = 0;              // unknown, expired or mismatched tickets, bad frames
  uint64_t connections_refused = 0;  // closed at accept: too many unproven from its address
  uint64_t connections_shed = 0;     // unproven, closed for a newcomer
  uint64_t expired = 0;              // tickets never used
  uint64_t sessions = 0;             // open get and put sessions
  uint32_t loops = 0;                // event loops
  uint32_t tier_threads = 0;         // threads of the disk work (0: no disk tier)
  bool lends_pages = false;          // lend_pages, where the host tier can lend them
  bool encrypted = false;            // TLS
};

class DataStreamServer {
 public:
  // kInvalidArgument (no store, a bad host), kUnavailable (cannot listen),
  // kAlreadyExists (the registry has the stream's metrics already).
  [[nodiscard]] static Result<std::unique_ptr<DataStreamServer>> Create(
      DataStreamServerOptions options);
  ~DataStreamServer();
  DataStreamServer(const DataStreamServer&) = delete;
  DataStreamServer& operator=(const DataStreamServer&) = delete;

  // "advertise_host:port".
  const std::string& address() const;
  // Ok while the listener accepts; kUnavailable while its accepts are failing (descriptors
  // exhausted: it keeps retrying). Safe from any thread.
  [[nodiscard]] Status Readiness() const;

  // `keys` under one format tag and salt scope (the session's, already checked).
  [[nodiscard]] Result<StreamGetOpened> OpenGet(std::span<const BlockKey> keys,
                                                const std::string& format_tag, uint64_t salt_scope,
                                                ExtraBlockSource* extra);
  // A session for keyed gets or keyed puts (protocol.h; stream_session.h says what each
  // runs under), with the caller's rights already checked: its salt scope, and
  // `any_scope` only for a node's credential. The ticket's total_bytes is 0. A keyed get
  // serves the tiers' blocks, then the session's `extra` source's (thread-safe, as
  // `on_request`). A keyed put's headers are checked as OpenPut checks them.
  // kInvalidArgument for an op that is neither, a get session's format tag that cannot
  // name a format, a put session with an extra source, or max_blocks outside 1 to
  // kMaxStreamKeys; kResourceExhausted when TicketTable::kMaxSessions are open.
  [[nodiscard]] Result<TransferTicket> OpenSession(StreamSession session);
  // REQUIRES: every header's salt scope is the session's. kInvalidArgument naming the
  // block for a header that cannot describe a block; kResourceExhausted (staging full).
  [[nodiscard]] Result<TransferTicket> OpenPut(std::vector<storage::BlockHeader> headers);

  DataStreamStats Stats() const;
  // Stops listening, cuts open transfers, frees every ticket, joins the thread. Idempotent.
  void Shutdown();

  class Impl;

 private:
  explicit DataStreamServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::store
