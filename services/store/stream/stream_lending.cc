// StreamConnection's zero-copy replies (SpliceWriter): a keyed get's blocks that the host
// tier holds are spliced from its pages into the socket, for a session opened with a
// node's credential whose client acks the replies it reads (protocol.h). The kernel
// reads those pages until the client has read them, so they stay pinned, unchanged,
// until then: parked here until the client's ack in a later request. A connection that
// goes idle with replies unacked unpins them lent after the grace: the host tier then
// replaces their memory before it writes them again (PinnedBlock::UnpinLent), which
// costs that later put a page fault per 4 KiB, and costs this reader nothing.
#include <algorithm>

#include "services/store/stream/stream_connection.h"

namespace kvtier::store {

bool StreamConnection::SplicesReply() {
  if (!context_.lend_pages || socket_.encrypted() || reply_.reply().code != 0 || !keyed() ||
      session_ == nullptr || !session_->any_scope || !reader_acks_ || lent_.full() ||
      !reply_.any_lendable()) {
    return false;
  }
  if (splicer_ == nullptr && !splicer_unavailable_) {
    Result<std::unique_ptr<SpliceWriter>> made = SpliceWriter::Create();
    asio::error_code ec;
    if (made.ok())
      socket_.tcp().native_non_blocking(true, ec);  // the splicer's calls must not block the loop
    if (made.ok() && !ec) splicer_ = std::move(*made);
    splicer_unavailable_ = splicer_ == nullptr;  // copied, as before, for this connection's life
  }
  if (splicer_ == nullptr) return false;
  splicer_->Clear();
  const std::vector<asio::const_buffer>& pieces = reply_.buffers();
  for (size_t i = 0; i < pieces.size(); ++i)
    splicer_->Add(pieces[i].data(), pieces[i].size(), reply_.lendable(i));
  return true;
}

void StreamConnection::WriteSpliced() {
  const Result<bool> done = splicer_->Write(socket_.tcp().native_handle());
  reply_lent_ = splicer_->lent_bytes() > 0;  // also when the write failed: the socket may hold some
  if (!done.ok()) return OnReplySent(asio::error::connection_reset);
  if (*done) return OnReplySent({});
  socket_.tcp().async_wait(asio::socket_base::wait_write,
                           [self = shared_from_this()](const asio::error_code& ec) {
                             if (ec) return self->OnReplySent(ec);
                             self->WriteSpliced();
                           });
}

void StreamConnection::OnAck() {
  const uint64_t acked = request_.ticket_id;
  if ((acked & kStreamAcksReplies) == 0 || acked > UINT32_MAX || request_.secret != 0) {
    return Refuse(InvalidArgumentError("an ack of " + std::to_string(acked) + " (secret " +
                                       std::to_string(request_.secret) +
                                       "): it must carry the acks flag in 32 bits, secret 0"));
  }
  lent_.Release(static_cast<uint32_t>(acked) & kStreamAckedMask);
  ReadRequest();
}

void StreamConnection::UnpinAllLent(bool in_flight) {
  lent_.UnpinAllLent();
  if (!in_flight) return;
  for (storage::PinnedBlock& pin : transfer_.pinned) pin.UnpinLent();
  reply_lent_ = false;
}

void StreamConnection::ArmLentTimer(std::chrono::steady_clock::duration after) {
  lent_timer_armed_ = true;
  lent_timer_.expires_after(after);
  lent_timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
    self->lent_timer_armed_ = false;
    if (ec || self->lent_.empty()) return;  // closed, or every lent reply was acked meanwhile
    const auto idle_for = std::chrono::steady_clock::now() - self->idle_since_;
    if (self->idle_ && idle_for >= self->context_.lent_grace)
      return self->UnpinAllLent(/*in_flight=*/false);
    // Busy since, or idle for less: wait out the rest of a grace from when it went idle.
    self->ArmLentTimer(self->idle_ ? self->context_.lent_grace - idle_for
                                   : self->context_.lent_grace);
  });
}

}  // namespace kvtier::store
