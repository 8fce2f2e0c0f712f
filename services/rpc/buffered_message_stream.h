// BufferedMessageStream: a Cap'n Proto MessageStream that reads through a buffer.
//
// capnp 0.9's AsyncIoMessageStream reads every message with two or three read() calls (the
// first word, the rest of the segment table, the segments), and a peer's Finish arriving
// behind a Call costs three more: on the coordinator's lookup path that was seven reads per
// call against one write. This stream reads as much as the socket holds into one buffer and
// serves every complete message from it, so a burst of small messages costs one read.
// (capnp 0.10 added a BufferedMessageStream of its own; Debian 12 ships 0.9.2.)
//
// Framing and limits are capnp's standard stream format and checks: at most 512 segments,
// and at most `ReaderOptions::traversalLimitInWords` words per message; a message over
// either, or a stream that ends inside a message, fails the read (the RPC system then
// drops that connection). Small messages are copied out of the buffer into their own
// array; a message larger than the buffer is read straight into its own array after the
// part already buffered, so bulk payloads are not copied twice. Writes go out as
// AsyncIoMessageStream writes them (one gathered write per message).
//
// File descriptors are not passed: reads return none and writes that carry any fail.
//
// Thread safety: none; used on the event-loop thread that owns the stream.
// Ownership: borrows `stream`, which must outlive this object.
//
// REQUIRES: at most one tryReadMessage in flight at a time (as the RPC system does).
#pragma once

#include <cstddef>
#include <functional>

#include <capnp/serialize-async.h>
#include <kj/async-io.h>

namespace kvtier::rpc {

struct BufferedMessageStreamOptions {
  // REQUIRES: a multiple of 8 of at least 4 KiB (room for the largest segment table).
  size_t buffer_bytes = size_t{64} * 1024;
  // Called on the stream's thread for every message read, before it is handed on (the
  // RPC server's busy polling watches for traffic with it). Optional.
  std::function<void()> on_message;
  // When set, a limit on each message's words beside ReaderOptions::traversalLimitInWords,
  // read anew for every message: a listener lowers it until its connection authenticates
  // (rpc_server.h). Checked on the segment table, before the message is allocated.
  const uint64_t* max_message_words = nullptr;
};

class BufferedMessageStream final : public capnp::MessageStream {
 public:
  explicit BufferedMessageStream(kj::AsyncIoStream& stream,
                                 BufferedMessageStreamOptions options = {});

  using capnp::MessageStream::tryReadMessage;
  using capnp::MessageStream::writeMessage;
  using capnp::MessageStream::writeMessages;

  kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> tryReadMessage(
      kj::ArrayPtr<kj::AutoCloseFd> fd_space, capnp::ReaderOptions options,
      kj::ArrayPtr<capnp::word> scratch) override;
  kj::Promise<void> writeMessage(
      kj::ArrayPtr<const int> fds,
      kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) override;
  kj::Promise<void> writeMessages(
      kj::ArrayPtr<kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>>> messages) override;
  kj::Maybe<int> getSendBufferSize() override;
  kj::Promise<void> end() override;

 private:
  struct Frame;
  // The next message's framing, when the buffer holds its whole segment table.
  kj::Maybe<Frame> ParseFrame(const capnp::ReaderOptions& options) const;
  kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> ReadLarge(const Frame& frame,
                                                               capnp::ReaderOptions options);
  size_t buffered() const { return end_ - begin_; }

  kj::AsyncIoStream& stream_;
  std::function<void()> on_message_;
  const uint64_t* max_message_words_;
  capnp::AsyncIoMessageStream writer_;
  kj::Array<capnp::word> buffer_;
  size_t begin_ = 0;  // bytes of buffer_ already served
  size_t end_ = 0;    // bytes of buffer_ filled
};

}  // namespace kvtier::rpc
