// StreamConnection's keyed puts (protocol.h, kPutHeaders): a put whose headers come on
// the stream under a put session, with no openPut call before it. The headers are
// checked as OpenPut checks them and the put's staging is taken as OpenPut takes it;
// from there it is a ticket's put (ReadPutPayload): into reserved host-tier pages or
// staging, every block checked against its header, the batch stored only when all pass.
// A refusal before the payloads (a bad header, staging full) is answered at once; the
// payloads the client sends meanwhile are read and dropped (Linger).
#include <utility>

#include "services/store/stream/stream_connection.h"

namespace kvtier::store {

void StreamConnection::ReadPutHeaders() {
  Result<std::shared_ptr<const StreamSession>> session =
      context_.tickets->UseSession(request_.ticket_id, request_.secret, StreamOp::kPutHeaders);
  if (!session.ok()) return Refuse(session.status());
  Prove();
  session_ = std::move(*session);
  socket_.ReadAll(
      asio::buffer(&headers_head_, sizeof(headers_head_)),
      [self = shared_from_this()](const asio::error_code& ec, size_t) { self->OnHeadersHead(ec); });
}

void StreamConnection::OnHeadersHead(const asio::error_code& ec) {
  if (ec) return Close();
  const uint64_t max_header_bytes = uint64_t{headers_head_.count} * storage::kMaxEncodedHeaderBytes;
  if (headers_head_.count == 0 || headers_head_.count > session_->max_blocks) {
    return Refuse(InvalidArgumentError("a keyed put of " + std::to_string(headers_head_.count) +
                                       " blocks: it must carry 1 to " +
                                       std::to_string(session_->max_blocks)));
  }
  if (headers_head_.header_bytes == 0 || headers_head_.header_bytes > max_header_bytes) {
    return Refuse(
        InvalidArgumentError("a keyed put of " + std::to_string(headers_head_.count) +
                             " blocks with " + std::to_string(headers_head_.header_bytes) +
                             " bytes of headers: at most " + std::to_string(max_header_bytes)));
  }
  headers_in_.resize(headers_head_.header_bytes);
  socket_.ReadAll(
      asio::buffer(headers_in_),
      [self = shared_from_this()](const asio::error_code& ec, size_t) { self->OnPutHeaders(ec); });
}

void StreamConnection::OnPutHeaders(const asio::error_code& ec) {
  if (ec) return Close();  // the client went: nothing was taken yet
  // A refused put's headers go when its reply is sent (SendReply), as every transfer's.
  if (Status opened = OpenKeyedPut(); !opened.ok()) return Refuse(opened);
  ReadPutPayload();
}

// What OpenPut does, on the loop: decoding and checking headers touches no tier.
Status StreamConnection::OpenKeyedPut() {
  transfer_ = OpenTransfer{};
  transfer_.op = StreamOp::kPutHeaders;
  transfer_.headers.reserve(headers_head_.count);
  std::span<const uint8_t> rest(headers_in_);
  uint64_t total = 0;
  for (uint32_t i = 0; i < headers_head_.count; ++i) {
    const std::string block = "block " + std::to_string(i);
    size_t consumed = 0;
    Result<storage::BlockHeader> header = storage::DecodeHeader(rest, consumed);
    if (!header.ok()) {
      // A node out of room for new format tags says so (the code tells the sender to
      // back off); malformed is the sender's fault, not data lost on this node.
      if (header.status().code() == StatusCode::kResourceExhausted)
        return header.status().WithContext(block);
      return InvalidArgumentError(block + "'s header: " + header.status().message());
    }
    rest = rest.subspan(consumed);
    storage::SaltHeader(session_->salt, *header);
    KVTIER_RETURN_IF_ERROR(ScopeHeader(*header).WithContext(block));
    KVTIER_RETURN_IF_ERROR(
        storage::ValidateHeader(*header, context_.max_block_bytes).WithContext(block));
    total += header->payload_bytes;
    transfer_.headers.push_back(std::move(*header));
  }
  if (!rest.empty()) {
    return InvalidArgumentError(std::to_string(rest.size()) +
                                " bytes after the last of the put's " +
                                std::to_string(headers_head_.count) + " headers");
  }
  if (session_->on_request) {
    keys_.clear();
    for (const storage::BlockHeader& header : transfer_.headers) keys_.push_back(header.key);
    session_->on_request(keys_);
  }
  // As OpenPut: the staging bounds the puts in flight, whether or not the payloads land
  // in host-tier pages instead.
  Result<StagingBuffer> staging = context_.staging->Take(total);
  if (!staging.ok()) return staging.status().WithContext("staging the put");
  transfer_.buffer = std::move(*staging);
  return Status::Ok();
}

Status StreamConnection::ScopeHeader(storage::BlockHeader& header) const {
  if (header.salt_scope == 0) {
    header.salt_scope = session_->salt_scope;
  } else if (header.salt_scope != session_->salt_scope && !session_->any_scope) {
    return PermissionDeniedError("salt scope " + std::to_string(header.salt_scope) +
                                 " is not this put session's");
  }
  return Status::Ok();
}

}  // namespace kvtier::store
