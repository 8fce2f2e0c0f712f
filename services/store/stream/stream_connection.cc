#include "services/store/stream/stream_connection.h"

#include <algorithm>

#include "services/store/stream/put_payload.h"

namespace kvtier::store {

StreamConnection::StreamConnection(const StreamContext& context, asio::ip::tcp::socket socket)
    : context_(context),
      socket_(std::move(socket), context.tls),
      timer_(socket_.get_executor()),
      lent_timer_(socket_.get_executor()) {
  asio::error_code ignored;
  socket_.tcp().set_option(asio::ip::tcp::no_delay(true), ignored);
}

StreamConnection::~StreamConnection() {
  UnpinAllLent(/*in_flight=*/reply_lent_);
  if (admission_id_ != 0 && context_.admission != nullptr)
    context_.admission->Closed(admission_id_);
}

void StreamConnection::Start(ConnectionAdmission::Id admission_id) {
  admission_id_ = admission_id;
  // A connection that never showed a ticket has no right to idle.
  timer_.expires_after(context_.first_request_deadline);
  timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
    if (!ec && !self->proven_) self->Close();
  });
  socket_.Handshake([self = shared_from_this()](const asio::error_code& ec) {
    if (ec) return self->Close();
    self->ReadRequest();
  });
}

std::string StreamConnection::peer() const {
  asio::error_code ec;
  const asio::ip::tcp::endpoint remote = socket_.tcp().remote_endpoint(ec);
  return ec ? "unknown" : remote.address().to_string();
}

void StreamConnection::Prove() {
  if (proven_) return;
  proven_ = true;
  ArmTimer();  // the transfer's, in place of the first-request deadline
  if (admission_id_ != 0 && context_.admission != nullptr)
    context_.admission->Proven(admission_id_);
}

void StreamConnection::ReadRequest() {
  // Idle between transfers is the right of a client that showed a valid ticket or
  // session; only transfers are timed then.
  if (proven_) timer_.cancel();
  idle_ = true;
  // Only the lent timer reads when the connection went idle, and only while replies are
  // parked (a reply is parked just before this): no clock read per request otherwise.
  if (!lent_.empty()) {
    idle_since_ = std::chrono::steady_clock::now();
    if (!lent_timer_armed_) ArmLentTimer(context_.lent_grace);
  }
  socket_.ReadAll(
      asio::buffer(&request_, sizeof(request_)),
      [self = shared_from_this()](const asio::error_code& ec, size_t) { self->OnRequest(ec); });
}

void StreamConnection::ArmTimer() {
  timer_.expires_after(context_.client_timeout);
  timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
    if (!ec) self->Close();
  });
}

void StreamConnection::OnRequest(const asio::error_code& ec) {
  if (ec) return Close();  // the client went (between transfers: the normal end)
  idle_ = false;
  started_ = std::chrono::steady_clock::now();
  // An unproven connection's requests (acks, refused tickets) never extend its first-request
  // deadline; the transfer timer starts once a ticket or session proves it (Prove).
  if (proven_) ArmTimer();
  if (request_.magic != kStreamMagic) {
    return Refuse(InvalidArgumentError("not a kvtier data stream request (bad magic)"));
  }
  const auto op = static_cast<StreamOp>(request_.op);
  if (op == StreamOp::kGetKeys) return ReadKeys();
  if (op == StreamOp::kPutHeaders) return ReadPutHeaders();
  if (op == StreamOp::kAck) return OnAck();
  if (op != StreamOp::kGet && op != StreamOp::kPut) {
    return Refuse(
        InvalidArgumentError("unknown data stream operation " + std::to_string(request_.op)));
  }
  Result<OpenTransfer> taken = context_.tickets->Take(request_.ticket_id, request_.secret, op);
  if (!taken.ok()) return Refuse(taken.status());
  Prove();
  transfer_ = std::move(*taken);
  if (op == StreamOp::kGet) return ServeGet();
  ReadPutPayload();
}

void StreamConnection::ReadPutPayload() {
  // Making room for the batch may demote the tier's victims to disk.
  OffLoop(
      context_.disk,
      [self = shared_from_this()] {
        Result<storage::HostReservation> reserved =
            self->context_.store->host_pages().Reserve(self->transfer_.headers);
        if (reserved.ok()) self->transfer_.in_place = std::move(*reserved);
      },
      [self = shared_from_this()] { self->ReadPutInto(); });
}

void StreamConnection::ReadPutInto() {
  if (transfer_.in_place.headers().empty()) {  // not reserved: through staging and PutBatch
    socket_.ReadAll(asio::buffer(transfer_.buffer.bytes().data(), transfer_.buffer.size()),
                    [self = shared_from_this()](const asio::error_code& ec, size_t) {
                      self->OnPutPayload(ec);
                    });
    return;
  }
  ReservedPieces(transfer_.in_place, scatter_);
  socket_.ReadAll(scatter_, [self = shared_from_this()](const asio::error_code& ec, size_t) {
    self->OnPutInPlace(ec);
  });
}

void StreamConnection::OnPutInPlace(const asio::error_code& ec) {
  if (ec) return Close();  // the client went mid-transfer: the reserved pages go with transfer_
  context_.counters->bytes_received += transfer_.buffer.size();
  FinishPut(context_.store->host_pages().Commit(std::move(transfer_.in_place)));
}

// The tiers' blocks are found now: pinned where they lie in the host tier (the write
// gathers from its pages), else read into staging (a block gone or corrupt since the
// open is sent as missing or corrupt: the states sent are final). Then the states and
// the present payloads go in one gathered write.
void StreamConnection::ServeGet() {
  if (!PinOrStage()) return;
  if (transfer_.read_at_send.size() == 0) {  // every block pinned, or from the extra source
    GatherReply();
    return SendReply();
  }
  OffLoop(
      context_.disk, [self = shared_from_this()] { self->GatherReply(); },
      [self = shared_from_this()] { self->SendReply(); });
}

void StreamConnection::GatherReply() {
  const auto n = static_cast<uint32_t>(transfer_.states.size());
  reply_.BeginGet(n, keyed());
  uint64_t sent = 0, read_offset = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (transfer_.states[i] == StreamBlockState::kPresent) sent += GatherBlock(i, &read_offset);
    reply_.SetState(i, transfer_.states[i]);
  }
  reply_.FinishGet(sent);
  transfer_.payload_bytes = sent;
  context_.counters->gets++;
  context_.counters->bytes_sent += sent;
}

bool StreamConnection::PinOrStage() {
  const auto n = static_cast<uint32_t>(transfer_.states.size());
  pin_of_.assign(n, -1);
  transfer_.pinned.reserve(n);  // one allocation, however many blocks
  uint64_t to_read = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const GetSlot& slot = transfer_.slots[i];
    if (transfer_.states[i] != StreamBlockState::kPresent || !slot.read_at_send) continue;
    if (PinInPlace(slot)) {
      pin_of_[i] = static_cast<int32_t>(transfer_.pinned.size() - 1);
    } else {
      to_read += slot.bytes;
    }
  }
  if (to_read == 0) return true;
  Result<StagingBuffer> staging = context_.staging->Take(to_read);
  if (staging.ok()) {
    transfer_.read_at_send = std::move(*staging);
    return true;
  }
  transfer_.pinned.clear();
  Refuse(staging.status().WithContext("staging the get's blocks not in host memory"));
  return false;
}

uint64_t StreamConnection::GatherBlock(uint32_t i, uint64_t* read_offset) {
  const GetSlot& slot = transfer_.slots[i];
  if (pin_of_[i] >= 0) {
    const storage::PinnedBlock& pinned = transfer_.pinned[static_cast<size_t>(pin_of_[i])];
    pinned.ForEachPiece(
        [&](std::span<const uint8_t> piece) { reply_.AddPiece(piece, /*lendable=*/true); });
    if (keyed()) AddSentHeader(i, pinned.header());
    return slot.bytes;
  }
  std::span<const uint8_t> out;
  if (slot.read_at_send) {
    const std::span<uint8_t> into =
        transfer_.read_at_send.bytes().subspan(*read_offset, slot.bytes);
    *read_offset += slot.bytes;
    storage::BlockHeader header;
    transfer_.states[i] =
        ReadFromTiers({slot.key, transfer_.format_tag, transfer_.salt_scope}, into, &header);
    out = into;
    if (keyed() && transfer_.states[i] == StreamBlockState::kPresent) AddSentHeader(i, header);
  } else {
    out = slot.held.empty() ? transfer_.buffer.bytes().subspan(slot.offset, slot.bytes) : slot.held;
    if (keyed()) AddSentHeader(i, transfer_.headers[slot.header]);
  }
  if (transfer_.states[i] != StreamBlockState::kPresent) return 0;
  reply_.AddPiece(out, /*lendable=*/false);
  return out.size();
}

void StreamConnection::AddSentHeader(uint32_t i, const storage::BlockHeader& header) {
  if (session_ == nullptr || session_->salt.identity()) return reply_.AddHeader(header);
  storage::BlockHeader named = header;
  named.key = client_keys_[i];
  reply_.AddHeader(named);
}

bool StreamConnection::PinInPlace(const GetSlot& slot) {
  Result<storage::PinnedBlock> pinned =
      context_.store->host_pages().Pin({slot.key, transfer_.format_tag, transfer_.salt_scope});
  // Not in the host tier (or stored again with another size since the open): read it.
  if (!pinned.ok() || pinned->header().payload_bytes != slot.bytes) return false;
  transfer_.pinned.push_back(std::move(*pinned));
  return true;
}

StreamBlockState StreamConnection::ReadFromTiers(const storage::BlockRef& ref,
                                                 std::span<uint8_t> out,
                                                 storage::BlockHeader* header) {
  Result<storage::TieredHit> hit = context_.store->Get(ref, out);
  if (hit.ok() && hit->header.payload_bytes == out.size()) {
    *header = std::move(hit->header);
    return StreamBlockState::kPresent;
  }
  if (hit.ok()) return StreamBlockState::kMissing;  // stored again with another size since the open
  return hit.status().code() == StatusCode::kDataLoss ? StreamBlockState::kCorrupt
                                                      : StreamBlockState::kMissing;
}

void StreamConnection::OnPutPayload(const asio::error_code& ec) {
  if (ec) return Close();  // the client went mid-transfer: its staging goes with transfer_
  context_.counters->bytes_received += transfer_.buffer.size();
  // Every block is checked before any is stored: a bad one refuses the whole batch.
  Result<std::vector<storage::PutItem>> items =
      StagedPutItems(transfer_.headers, transfer_.buffer.bytes(), context_.max_block_bytes);
  if (!items.ok()) return Refuse(items.status());
  // A put through PutBatch may write to disk (its blocks, or the victims it demotes).
  auto results = std::make_shared<std::vector<Status>>();
  OffLoop(
      context_.disk,
      [self = shared_from_this(), items = std::move(*items), results] {
        *results = self->context_.store->PutBatch(items);
      },
      [self = shared_from_this(), results] { self->FinishPut(*results); });
}

void StreamConnection::FinishPut(const std::vector<Status>& results) {
  // The payloads are stored or refused: their staging is freed before the reply, so a
  // client that reads the reply and opens its next transfer finds the room this one held.
  transfer_.payload_bytes = transfer_.buffer.size();
  transfer_.buffer = StagingBuffer{};
  if (Status outcome = PutOutcome(results); !outcome.ok()) return Refuse(outcome);
  reply_.Stored(static_cast<uint32_t>(results.size()));
  context_.counters->puts++;
  SendReply();
}

void StreamConnection::Refuse(const Status& status) {
  context_.counters->refused++;
  const auto op = static_cast<StreamOp>(request_.op);
  const bool known = op == StreamOp::kGet || op == StreamOp::kGetKeys || IsPut(op);
  if (context_.metrics != nullptr && known) context_.metrics->Refused(op);
  reply_.Refusal(status);
  SendReply();
}

void StreamConnection::SendReply() {
  if (SplicesReply()) return WriteSpliced();
  socket_.WriteAll(
      reply_.buffers(),
      [self = shared_from_this()](const asio::error_code& ec, size_t) { self->OnReplySent(ec); });
}

void StreamConnection::OnReplySent(const asio::error_code& ec) {
  const bool refused = reply_.reply().code != 0;
  if (!ec && !refused && context_.metrics != nullptr) {
    const auto op = static_cast<StreamOp>(request_.op);
    context_.metrics->Transferred(
        op, transfer_.payload_bytes,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  }
  GiveHoldsBack();
  if (!ec && !refused && keyed()) keyed_replies_ = (keyed_replies_ + 1) & kStreamAckedMask;
  if (reply_lent_) {
    context_.counters->bytes_lent += splicer_->lent_bytes();
    if (context_.metrics != nullptr) context_.metrics->Lent(splicer_->lent_bytes());
    // Pinned until its reader says it read them; a reply cut off is not read to the end.
    if (!ec && !refused) {
      lent_.Park(keyed_replies_, transfer_.pinned);  // counted already: as its reader will
    } else {
      for (storage::PinnedBlock& pin : transfer_.pinned) pin.UnpinLent();
    }
    reply_lent_ = false;
  }
  transfer_ = OpenTransfer{};  // frees the staging buffer, unpins the host tier's blocks
  if (ec) return Close();
  if (refused) return Linger();
  ReadRequest();
}

// A keyed get's holds on its source's blocks, once their bytes are sent (or refused):
// given back from the tier pool, since through a LoopBoundBlockSource that waits for
// the source's loop (its busy moments included), which no stream loop must.
void StreamConnection::GiveHoldsBack() {
  if (transfer_.source_holds.empty()) return;
  asio::post(*context_.tier_pool,
             [holds = std::move(transfer_.source_holds)]() mutable { holds.Release(); });
}

// After a refusal the client may still be sending (a put's payload): read and drop it
// until the client closes, so that closing with unread bytes does not reset the
// connection and lose the reply before the client reads it. The transfer timer bounds it.
void StreamConnection::Linger() {
  socket_.ShutdownSend();
  discard_.resize(size_t{64} * 1024);
  socket_.DiscardSome(asio::buffer(discard_),
                      [self = shared_from_this()](const asio::error_code& ec, size_t) {
                        if (ec) return self->Close();
                        self->Linger();
                      });
}

void StreamConnection::Close() {
  timer_.cancel();
  lent_timer_.cancel();
  socket_.Close();
}

}  // namespace kvtier::store
