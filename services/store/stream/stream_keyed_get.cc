// StreamConnection's keyed gets (protocol.h, kGetKeys): a get whose blocks are named on
// the stream under a get session, with no openGet call before it. Once its blocks are
// found it is served exactly as a ticket's get (ServeGet): the tiers' pinned in the host
// tier or staged from disk at send. Those of the session's extra source (a worker's pool)
// are found before: held in place and sent from the source's pages where it holds them (a
// host pool), held apart and sent from the source's staging (a GPU pool's, gathered here;
// copied out where the source stages none), else read into staging. Its reply carries
// each sent block's header.
#include <utility>

#include "services/store/stream/source_staging.h"
#include "services/store/stream/stream_connection.h"

namespace kvtier::store {

static_assert(sizeof(BlockKey) == 16 && std::is_trivially_copyable_v<BlockKey>,
              "keys are read from the stream straight into BlockKeys (u64 hi, u64 lo)");

void StreamConnection::ReadKeys() {
  Result<std::shared_ptr<const StreamSession>> session =
      context_.tickets->UseSession(request_.ticket_id, request_.secret, StreamOp::kGetKeys);
  if (!session.ok()) return Refuse(session.status());
  Prove();
  session_ = std::move(*session);
  socket_.ReadAll(
      asio::buffer(&keys_head_, sizeof(keys_head_)),
      [self = shared_from_this()](const asio::error_code& ec, size_t) { self->OnKeysHead(ec); });
}

void StreamConnection::OnKeysHead(const asio::error_code& ec) {
  if (ec) return Close();
  const bool acks = (keys_head_.acked & kStreamAcksReplies) != 0;
  if (keys_head_.count == 0 || keys_head_.count > session_->max_blocks ||
      (!acks && keys_head_.acked != 0)) {
    return Refuse(InvalidArgumentError(
        "a keyed get of " + std::to_string(keys_head_.count) + " keys (acked field " +
        std::to_string(keys_head_.acked) + "): it must name 1 to " +
        std::to_string(session_->max_blocks) + " keys, acked 0 or with the acks flag"));
  }
  reader_acks_ = acks;
  if (acks) lent_.Release(keys_head_.acked & kStreamAckedMask);
  keys_.resize(keys_head_.count);
  socket_.ReadAll(
      asio::buffer(keys_.data(), keys_.size() * sizeof(BlockKey)),
      [self = shared_from_this()](const asio::error_code& ec, size_t) { self->OnKeys(ec); });
}

void StreamConnection::OnKeys(const asio::error_code& ec) {
  if (ec) return Close();  // the client went: nothing was taken yet
  if (!session_->salt.identity()) {
    client_keys_ = keys_;
    session_->salt.ApplyInPlace(keys_);
  }
  // A block's header may have to be read from the disk tier, and a session's extra source
  // is read on the loop that serves it: either may wait, so not on this loop.
  OffLoop(
      context_.disk || session_->extra != nullptr,
      [self = shared_from_this()] { self->keyed_opened_ = self->OpenKeyedGet(); },
      [self = shared_from_this()] {
        if (!self->keyed_opened_.ok()) return self->Refuse(self->keyed_opened_);
        self->ServeGet();
      });
}

// What OpenGet does, here: each of the tiers' blocks present now is found again at send
// (ServeGet), so it holds nothing until then; the extra source's are read now.
Status StreamConnection::OpenKeyedGet() {
  if (session_->on_request) session_->on_request(keys_);
  transfer_ = OpenTransfer{};
  transfer_.op = StreamOp::kGetKeys;
  transfer_.format_tag = session_->format_tag;
  transfer_.salt_scope = session_->salt_scope;
  transfer_.states.assign(keys_.size(), StreamBlockState::kMissing);
  transfer_.slots.resize(keys_.size());
  std::vector<uint32_t> lacking;  // positions of the blocks the tiers lack
  lacking.reserve(keys_.size());
  for (uint32_t i = 0; i < keys_.size(); ++i) {
    const Result<storage::BlockHeader> header =
        context_.store->Peek({keys_[i], transfer_.format_tag, transfer_.salt_scope});
    if (!header.ok()) {
      lacking.push_back(i);
      continue;
    }
    transfer_.states[i] = StreamBlockState::kPresent;
    transfer_.slots[i] =
        GetSlot{.bytes = header->payload_bytes, .read_at_send = true, .key = keys_[i]};
  }
  if (session_->extra == nullptr || lacking.empty()) return Status::Ok();
  // Its calls hop to the source's loop; a block whose checksum the source did not keep is
  // hashed here, off that loop. The holds are given back once the reply is sent (SendReply).
  return HoldFromSource(session_->extra, keys_, lacking, *context_.staging,
                        context_.max_block_bytes, transfer_);
}

}  // namespace kvtier::store
