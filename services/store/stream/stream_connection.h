// StreamConnection: one client connection of a node's data stream (protocol.h), served
// on the stream's event loop: request, transfer, reply, and again until the client
// closes. Internal to services/store/stream.
//
// Thread safety: every method runs on the stream's io_context thread.
// Ownership: shared; pending asynchronous operations keep it alive. The context
// outlives every connection (the io_context is destroyed before it).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <asio.hpp>

#include "services/store/stream/lent_replies.h"
#include "services/store/stream/reply_gather.h"
#include "services/store/stream/splice_writer.h"
#include "services/store/stream/staging_pool.h"
#include "services/store/stream/stream_admission.h"
#include "services/store/stream/stream_metrics.h"
#include "services/store/stream/stream_socket.h"
#include "services/store/stream/ticket_table.h"
#include "storage/tiered_store.h"

namespace kvtier::store {

struct StreamCounters {
  std::atomic<uint64_t> gets{0}, puts{0}, bytes_sent{0}, bytes_received{0}, refused{0};
  std::atomic<uint64_t> bytes_lent{0};  // of bytes_sent: spliced from the host tier's pages
  std::atomic<uint64_t> connections_refused{0};  // closed at accept
  std::atomic<uint64_t> connections_shed{0};     // unproven, closed for a newcomer
};

struct StreamContext {
  TicketTable* tickets = nullptr;
  storage::TieredStore* store = nullptr;
  StreamCounters* counters = nullptr;
  StreamMetrics* metrics = nullptr;      // optional
  StagingPool* staging = nullptr;        // a get's blocks that are not in host memory when sent
  StreamAdmission* admission = nullptr;  // optional: told when a connection proves itself, closes
  // Where work that may wait runs, off the loops: tier calls where the store has a disk
  // tier (`disk`), and keyed gets' calls to a session's extra source (reads, holds and
  // their return).
  asio::thread_pool* tier_pool = nullptr;
  bool disk = false;
  // Keyed gets of node sessions to clients that ack (protocol.h) send the host tier's
  // pinned pages zero copy (SpliceWriter), keeping them pinned until acked, or unpinned
  // lent once the connection has been idle for `lent_grace`.
  bool lend_pages = false;
  std::chrono::milliseconds lent_grace{100};
  uint64_t max_block_bytes = 0;
  std::chrono::milliseconds client_timeout{10'000};
  std::chrono::milliseconds first_request_deadline{5'000};  // until a valid ticket or session
  // Set: every connection is TLS (its handshake within the first-request deadline), and
  // replies are copied, never spliced. Outlives the connections.
  SSL_CTX* tls = nullptr;
};

class StreamConnection : public std::enable_shared_from_this<StreamConnection> {
 public:
  StreamConnection(const StreamContext& context, asio::ip::tcp::socket socket);
  // Pages still lent (a reply cut off with its loop, replies never acked) are unpinned lent.
  ~StreamConnection();
  // Handshakes (TLS), then reads the first request; `admission_id` is its place in the
  // context's admission.
  void Start(ConnectionAdmission::Id admission_id);
  // Closes it (the stream shed it). On its loop, as every method.
  void Shed() { Close(); }
  asio::any_io_executor executor() { return socket_.get_executor(); }
  // The peer's address without its port; "unknown" when the socket has none.
  std::string peer() const;

 private:
  void ReadRequest();
  void OnRequest(const asio::error_code& ec);
  // Runs `work` on the tier pool where `off` (tier calls that may wait for the disk, or
  // reads of a session's extra source, which wait for the loop serving it), then `then`
  // back on this connection's loop; both on the loop otherwise. The transfer is this
  // connection's alone meanwhile: no socket operation is pending but the timer's, whose
  // Close() touches no transfer state.
  template <typename Work, typename Then>
  void OffLoop(bool off, Work work, Then then) {
    if (!off) {
      work();
      return then();
    }
    asio::post(*context_.tier_pool, [self = shared_from_this(), work = std::move(work),
                                     then = std::move(then)]() mutable {
      work();
      asio::post(self->socket_.get_executor(), std::move(then));
    });
  }
  // A keyed get (stream_keyed_get.cc): the session checked, its keys read, its blocks
  // found (off the loop: a header may be on disk), those the tiers lack held or read from
  // the session's extra source (off the loop: it waits for that source's loop), then
  // served as a get. kResourceExhausted when staging is full.
  void ReadKeys();
  void OnKeysHead(const asio::error_code& ec);
  void OnKeys(const asio::error_code& ec);
  [[nodiscard]] Status OpenKeyedGet();
  bool keyed() const { return static_cast<StreamOp>(request_.op) == StreamOp::kGetKeys; }
  // A keyed put (stream_keyed_put.cc): the session checked, its headers read and checked
  // as OpenPut checks them, its staging taken, then read as a ticket's put.
  void ReadPutHeaders();
  void OnHeadersHead(const asio::error_code& ec);
  void OnPutHeaders(const asio::error_code& ec);
  [[nodiscard]] Status OpenKeyedPut();
  // A keyed put's header under the session's salt scope: 0 becomes the session's.
  [[nodiscard]] Status ScopeHeader(storage::BlockHeader& header) const;
  void ServeGet();
  // The get's reply (reply_), the tiers' unpinned blocks read into staging now (from the
  // tier pool when they may wait for the disk).
  void GatherReply();
  // Pins each of the tiers' blocks that the host tier holds (`pin_of_`); the bytes of the
  // others, to be read from disk, are staged now. False (and refused) when staging is
  // full: nothing is sent yet, and the client may retry.
  bool PinOrStage();
  // Block i of a get, present at open, into the reply: its pinned pages, or its bytes
  // read now into `read_at_send` staging (at `*read_offset`), or its extra-source slot
  // (the source's held pages, or staging).
  // Its state becomes final; returns the payload bytes gathered (0: missing or corrupt).
  uint64_t GatherBlock(uint32_t i, uint64_t* read_offset);
  // A tier's block pinned in the host tier's pages until sent; false when the host tier
  // does not hold it as opened.
  bool PinInPlace(const GetSlot& slot);
  // One block of a get from the node's tiers into its slot: its state as sent, and its
  // header in `*header` when present.
  StreamBlockState ReadFromTiers(const storage::BlockRef& ref, std::span<uint8_t> out,
                                 storage::BlockHeader* header);
  // A keyed get's reply carries the header of each block sent.
  // Block `i`'s header, under the key the client named.
  void AddSentHeader(uint32_t i, const storage::BlockHeader& header);
  // A put's payloads go straight into host-tier pages reserved for its blocks where the
  // tier takes the batch as new blocks; else into staging, stored by PutBatch.
  void ReadPutPayload();
  // After the reservation was tried: the payloads' read, into its pages or into staging.
  void ReadPutInto();
  void OnPutPayload(const asio::error_code& ec);
  void OnPutInPlace(const asio::error_code& ec);
  // The put's reply, or the refusal naming its first block that failed.
  void FinishPut(const std::vector<Status>& results);
  // Writes `reply_`'s buffers, then reads the next request, or
  // closes when the reply carried an error.
  void SendReply();
  // Whether this reply goes through the splicer: a get with pinned pages, where lending
  // is on and a pipe could be had. Loads the splicer with the reply's ranges.
  bool SplicesReply();
  void WriteSpliced();
  // After a reply's last byte went, or the connection failed: its transfer released (a
  // lent one's pins unpinned lent), then the next request read.
  void OnReplySent(const asio::error_code& ec);
  // A kAck request: the replies it acks released (LentReplies), no reply, then the next request.
  void OnAck();
  // Every parked reply, and the one in flight when `in_flight`, unpinned lent.
  void UnpinAllLent(bool in_flight);
  // While parked replies wait on an idle connection: unpinned lent once it has been idle
  // for the grace. One wait at a time, not one per request: a busy connection's requests
  // only move `idle_since_`.
  void ArmLentTimer(std::chrono::steady_clock::duration after);
  // Hands the transfer's holds on its source's blocks to the tier pool, which gives them back.
  void GiveHoldsBack();
  void Refuse(const Status& status);
  void Linger();
  void Close();
  // A transfer stalled for the client timeout is cut off (its staging freed).
  void ArmTimer();

  const StreamContext& context_;
  StreamSocket socket_;
  asio::steady_timer timer_;
  StreamRequest request_;
  std::chrono::steady_clock::time_point started_;  // the current request's arrival
  ReplyGather reply_;                              // the current reply's bytes, as written
  OpenTransfer transfer_;
  // keyed gets and puts: the session; a get's keys asked; a put's headers as they came
  std::shared_ptr<const StreamSession> session_;
  StreamKeysHead keys_head_;
  std::vector<BlockKey> keys_;
  std::vector<BlockKey> client_keys_;  // a keyed get's keys as sent, where the session salts them
  Status keyed_opened_;                // OpenKeyedGet's, handed from the tier pool to the loop
  StreamHeadersHead headers_head_;
  std::vector<uint8_t> headers_in_;
  std::unique_ptr<SpliceWriter> splicer_;  // made at the first reply it sends
  bool splicer_unavailable_ = false;
  bool reply_lent_ = false;  // some of the current reply's pages went to the kernel by reference
  // Keyed-get replies sent whole on this connection (mod 2^31), as the reader counts
  // the replies it read (protocol.h, acked); whether the current get's reader acks.
  uint32_t keyed_replies_ = 0;
  bool reader_acks_ = false;
  LentReplies lent_;  // lent replies whose reader has not acked them yet
  asio::steady_timer lent_timer_;
  bool lent_timer_armed_ = false;
  bool idle_ = false;  // waiting for the next request
  // It showed a valid ticket or session; until then even its wait for a request is timed.
  bool proven_ = false;
  ConnectionAdmission::Id admission_id_ = 0;
  void Prove();
  std::chrono::steady_clock::time_point idle_since_;
  std::vector<int32_t> pin_of_;                // get: block i's index in transfer_.pinned, or -1
  std::vector<asio::mutable_buffer> scatter_;  // put in place: the reserved pages, in payload order
  std::vector<uint8_t> discard_;
};

}  // namespace kvtier::store
