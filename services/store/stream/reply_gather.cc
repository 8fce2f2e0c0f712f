#include "services/store/stream/reply_gather.h"

namespace kvtier::store {

void ReplyGather::Start() {
  reply_ = StreamReply{};
  buffers_.assign({asio::const_buffer(&reply_, sizeof(reply_))});
  lendable_.clear();
  any_lendable_ = false;
  with_headers_ = false;
}

void ReplyGather::Refusal(const Status& status) {
  Start();
  message_ = status.message().substr(0, kMaxStreamMessageBytes);
  reply_.code = static_cast<uint32_t>(status.code());
  reply_.message_bytes = static_cast<uint32_t>(message_.size());
  buffers_.emplace_back(message_.data(), message_.size());
}

void ReplyGather::Stored(uint32_t blocks) {
  Start();
  reply_.blocks = blocks;
}

void ReplyGather::BeginGet(uint32_t blocks, bool headers) {
  Start();
  with_headers_ = headers;
  states_.assign(PaddedStateBytes(blocks), 0);
  headers_.clear();
  if (headers) buffers_.emplace_back(&header_bytes_, sizeof(header_bytes_));
  buffers_.emplace_back(states_.data(), states_.size());
  headers_at_ = buffers_.size();
  if (headers) buffers_.emplace_back();  // the headers, known once every block is added
  reply_.blocks = blocks;
}

void ReplyGather::AddPiece(std::span<const uint8_t> bytes, bool lendable) {
  if (lendable) {
    lendable_.resize(buffers_.size(), 0);
    lendable_.push_back(1);
    any_lendable_ = true;
  }
  buffers_.emplace_back(bytes.data(), bytes.size());
}

void ReplyGather::AddHeader(const storage::BlockHeader& header) {
  storage::EncodeHeader(header, headers_);
}

void ReplyGather::SetState(uint32_t block, StreamBlockState state) {
  states_[block] = static_cast<uint8_t>(state);
}

void ReplyGather::FinishGet(uint64_t payload_bytes) {
  if (with_headers_) {
    headers_.resize((headers_.size() + 7) / 8 * 8, '\0');
    header_bytes_ = headers_.size();
    buffers_[headers_at_] = asio::const_buffer(headers_.data(), headers_.size());
  }
  reply_.payload_bytes = payload_bytes;
}

}  // namespace kvtier::store
