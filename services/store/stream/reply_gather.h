// ReplyGather: the bytes of one data stream reply, as the buffers a connection writes in
// one gathered write (protocol.h's layout): the fixed reply, then a refusal's message, or
// a get's optional header length, block states, optional headers and the blocks' bytes.
// The blocks are referenced, never copied; each piece says whether it may be lent to the
// kernel (spliced from the host tier's pinned pages). Internal to services/store/stream.
//
// Thread safety: none; one connection's, on its loop (or a tier thread that owns the
// connection's reply while it gathers).
// Ownership: the buffers point into this object and into the blocks added; both must
// outlive the write.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <asio/buffer.hpp>

#include "common/status.h"
#include "services/store/stream/protocol.h"
#include "storage/block_header.h"

namespace kvtier::store {

class ReplyGather {
 public:
  // The reply of a refusal: its code and message (cut to kMaxStreamMessageBytes).
  void Refusal(const Status& status);
  // The reply of a put whose `blocks` blocks were all stored.
  void Stored(uint32_t blocks);

  // A get's reply of `blocks` blocks: each block's bytes added in order (AddPiece), its
  // state set (SetState), and with `headers` (a keyed get) its header (AddHeader); then
  // FinishGet. REQUIRES: Begin, then the blocks, then FinishGet, before the write.
  void BeginGet(uint32_t blocks, bool headers);
  void AddPiece(std::span<const uint8_t> bytes, bool lendable);
  void AddHeader(const storage::BlockHeader& header);
  void SetState(uint32_t block, StreamBlockState state);
  void FinishGet(uint64_t payload_bytes);

  const StreamReply& reply() const { return reply_; }
  const std::vector<asio::const_buffer>& buffers() const { return buffers_; }
  // Whether piece i of buffers() may be lent (spliced) rather than copied.
  bool lendable(size_t i) const { return i < lendable_.size() && lendable_[i] != 0; }
  bool any_lendable() const { return any_lendable_; }

 private:
  void Start();

  StreamReply reply_;
  std::string message_;
  uint64_t header_bytes_ = 0;
  std::vector<uint8_t> states_;
  std::string headers_;
  size_t headers_at_ = 0;  // the headers' buffer, filled in by FinishGet
  bool with_headers_ = false;
  std::vector<asio::const_buffer> buffers_;
  std::vector<uint8_t> lendable_;  // parallel to buffers_, where any piece is lendable
  bool any_lendable_ = false;
};

}  // namespace kvtier::store
