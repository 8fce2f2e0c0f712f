#include "services/rpc/buffered_message_stream.h"

#include <cstring>

#include <capnp/message.h>
#include <kj/debug.h>

namespace kvtier::rpc {
namespace {

using capnp::word;

// capnp's stream format caps a message at 512 segments (serialize.c++ checks the same).
constexpr uint32_t kMaxSegments = 512;
constexpr size_t kMinBufferBytes = 4096;

uint32_t LoadLittleEndian32(const kj::byte* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

// A reader over `words`, split into segments by the sizes in the stream's segment table.
kj::Own<capnp::MessageReader> MakeReader(const kj::byte* table, uint32_t segment_count,
                                         kj::Array<word> words,
                                         const capnp::ReaderOptions& options) {
  auto segments = kj::heapArray<kj::ArrayPtr<const word>>(segment_count);
  size_t offset = 0;
  for (uint32_t i = 0; i < segment_count; ++i) {
    const size_t size = LoadLittleEndian32(table + 4 + size_t{4} * i);
    segments[i] = kj::arrayPtr(words.begin() + offset, size);
    offset += size;
  }
  auto reader = kj::heap<capnp::SegmentArrayMessageReader>(
      kj::ArrayPtr<const kj::ArrayPtr<const word>>(segments), options);
  // Attachments outlive the reader that points into them.
  return reader.attach(kj::mv(segments), kj::mv(words));
}

}  // namespace

struct BufferedMessageStream::Frame {
  uint32_t segment_count = 0;
  size_t table_bytes = 0;    // the segment table, padded to a whole word
  size_t message_bytes = 0;  // the segments after it
};

BufferedMessageStream::BufferedMessageStream(kj::AsyncIoStream& stream,
                                             BufferedMessageStreamOptions options)
    : stream_(stream),
      on_message_(std::move(options.on_message)),
      max_message_words_(options.max_message_words),
      writer_(stream),
      buffer_(kj::heapArray<word>(options.buffer_bytes / sizeof(word))) {
  KJ_REQUIRE(options.buffer_bytes >= kMinBufferBytes && options.buffer_bytes % sizeof(word) == 0,
             options.buffer_bytes);
}

kj::Maybe<BufferedMessageStream::Frame> BufferedMessageStream::ParseFrame(
    const capnp::ReaderOptions& options) const {
  if (buffered() < sizeof(word)) return nullptr;
  const kj::byte* table = buffer_.asBytes().begin() + begin_;
  const uint64_t segment_count = uint64_t{LoadLittleEndian32(table)} + 1;
  KJ_REQUIRE(segment_count <= kMaxSegments, "message has too many segments", segment_count,
             kMaxSegments);
  Frame frame;
  frame.segment_count = static_cast<uint32_t>(segment_count);
  frame.table_bytes = ((segment_count + 1) * 4 + 7) & ~size_t{7};
  if (buffered() < frame.table_bytes) return nullptr;
  uint64_t words = 0;
  for (uint32_t i = 0; i < frame.segment_count; ++i)
    words += LoadLittleEndian32(table + 4 + size_t{4} * i);
  KJ_REQUIRE(words <= options.traversalLimitInWords,
             "message is larger than the receiver's limit (ReaderOptions::traversalLimitInWords)",
             words * sizeof(word), options.traversalLimitInWords * sizeof(word));
  if (max_message_words_ != nullptr) {
    KJ_REQUIRE(words <= *max_message_words_, "message is larger than the connection's limit now",
               words * sizeof(word), *max_message_words_ * sizeof(word));
  }
  frame.message_bytes = words * sizeof(word);
  return frame;
}

kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> BufferedMessageStream::tryReadMessage(
    kj::ArrayPtr<kj::AutoCloseFd>, capnp::ReaderOptions options, kj::ArrayPtr<word>) {
  return kj::evalNow([&]() -> kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> {
    KJ_IF_MAYBE (frame, ParseFrame(options)) {
      const size_t frame_bytes = frame->table_bytes + frame->message_bytes;
      if (buffered() >= frame_bytes) {
        const kj::byte* table = buffer_.asBytes().begin() + begin_;
        auto words = kj::heapArray<word>(frame->message_bytes / sizeof(word));
        std::memcpy(words.begin(), table + frame->table_bytes, frame->message_bytes);
        auto reader = MakeReader(table, frame->segment_count, kj::mv(words), options);
        begin_ += frame_bytes;
        if (begin_ == end_) begin_ = end_ = 0;
        if (on_message_) on_message_();
        return kj::Maybe<capnp::MessageReaderAndFds>(
            capnp::MessageReaderAndFds{kj::mv(reader), nullptr});
      }
      if (frame_bytes > buffer_.asBytes().size()) return ReadLarge(*frame, options);
    }
    // Not a whole message yet: move what is left to the front and read what the socket has.
    if (begin_ > 0) {
      std::memmove(buffer_.asBytes().begin(), buffer_.asBytes().begin() + begin_, buffered());
      end_ -= begin_;
      begin_ = 0;
    }
    kj::ArrayPtr<kj::byte> space = buffer_.asBytes().slice(end_, buffer_.asBytes().size());
    return stream_.tryRead(space.begin(), 1, space.size())
        .then([this, options](size_t bytes) -> kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> {
          if (bytes == 0) {
            if (buffered() == 0) return kj::Maybe<capnp::MessageReaderAndFds>(nullptr);
            kj::throwFatalException(KJ_EXCEPTION(
                DISCONNECTED, "the peer closed the stream inside a message", buffered()));
          }
          end_ += bytes;
          return tryReadMessage(nullptr, options, nullptr);
        });
  });
}

kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> BufferedMessageStream::ReadLarge(
    const Frame& frame, capnp::ReaderOptions options) {
  // The message does not fit the buffer: the buffered part is copied once, and the rest is
  // read straight into the message's own array.
  const kj::byte* table = buffer_.asBytes().begin() + begin_;
  auto table_copy = kj::heapArray<kj::byte>(table, frame.table_bytes);
  auto words = kj::heapArray<word>(frame.message_bytes / sizeof(word));
  const size_t have = buffered() - frame.table_bytes;
  std::memcpy(words.begin(), table + frame.table_bytes, have);
  begin_ = end_ = 0;
  kj::byte* rest = words.asBytes().begin() + have;
  const size_t rest_bytes = frame.message_bytes - have;
  return stream_.read(rest, rest_bytes)
      .then([table_copy = kj::mv(table_copy), words = kj::mv(words),
             segment_count = frame.segment_count, options, this]() mutable {
        if (on_message_) on_message_();
        auto reader = MakeReader(table_copy.begin(), segment_count, kj::mv(words), options);
        return kj::Maybe<capnp::MessageReaderAndFds>(
            capnp::MessageReaderAndFds{kj::mv(reader), nullptr});
      });
}

kj::Promise<void> BufferedMessageStream::writeMessage(
    kj::ArrayPtr<const int> fds, kj::ArrayPtr<const kj::ArrayPtr<const word>> segments) {
  return writer_.writeMessage(fds, segments);
}

kj::Promise<void> BufferedMessageStream::writeMessages(
    kj::ArrayPtr<kj::ArrayPtr<const kj::ArrayPtr<const word>>> messages) {
  return writer_.writeMessages(messages);
}

kj::Maybe<int> BufferedMessageStream::getSendBufferSize() { return writer_.getSendBufferSize(); }

kj::Promise<void> BufferedMessageStream::end() { return writer_.end(); }

}  // namespace kvtier::rpc
