#include "services/rpc/buffered_message_stream.h"

#include <memory>
#include <string>
#include <vector>

#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>
#include <kj/async-io.h>

namespace kvtier::rpc {
namespace {

// One message whose root is a Data blob of `bytes` bytes, each byte `fill` + its index.
kj::Array<capnp::word> DataMessage(size_t bytes, uint8_t fill,
                                   uint32_t first_segment_words = 1024) {
  capnp::MallocMessageBuilder builder(first_segment_words, capnp::AllocationStrategy::FIXED_SIZE);
  capnp::Data::Builder data =
      builder.initRoot<capnp::AnyPointer>().initAs<capnp::Data>(static_cast<unsigned>(bytes));
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<kj::byte>(fill + i);
  return capnp::messageToFlatArray(builder);
}

// A message whose root is a list of `count` numbers, spread over many small segments.
kj::Array<capnp::word> MultiSegmentMessage(uint64_t count, size_t& segments) {
  capnp::MallocMessageBuilder builder(8, capnp::AllocationStrategy::FIXED_SIZE);
  auto root = builder.initRoot<capnp::AnyPointer>();
  // Lists of lists, each inner list in a segment of its own once the first is full.
  auto outer = root.initAs<capnp::List<capnp::List<uint64_t>>>(static_cast<unsigned>(count));
  for (unsigned i = 0; i < count; ++i) {
    auto inner = outer.init(i, 16);
    for (unsigned j = 0; j < 16; ++j) inner.set(j, i * 100 + j);
  }
  segments = builder.getSegmentsForOutput().size();
  return capnp::messageToFlatArray(builder);
}

void ExpectData(capnp::MessageReader& reader, size_t bytes, uint8_t fill) {
  const capnp::Data::Reader data = reader.getRoot<capnp::AnyPointer>().getAs<capnp::Data>();
  ASSERT_EQ(data.size(), bytes);
  for (size_t i = 0; i < bytes; ++i)
    ASSERT_EQ(data[i], static_cast<kj::byte>(fill + i)) << "byte " << i;
}

// An event loop and a socket pair: ends[0] is the stream under test, ends[1] its peer.
struct Loop {
  Loop() : io(kj::setupAsyncIo()), pipe(io.provider->newTwoWayPipe()) {}
  kj::AsyncIoContext io;
  kj::TwoWayPipe pipe;
};

class BufferedMessageStreamTest : public ::testing::Test {
 protected:
  BufferedMessageStreamTest()
      : loop_(std::make_unique<Loop>()), io_(loop_->io), pipe_(loop_->pipe) {}

  // Writes raw bytes from the far end of the socket pair, in chunks of `chunk` bytes with
  // the event loop run between them, so the reader sees the message arrive in pieces.
  void SendRaw(kj::ArrayPtr<const kj::byte> bytes, size_t chunk) {
    for (size_t at = 0; at < bytes.size(); at += chunk) {
      const size_t n = std::min(chunk, bytes.size() - at);
      pipe_.ends[1]->write(bytes.begin() + at, n).wait(io_.waitScope);
      io_.waitScope.poll();
    }
  }

  kj::Own<capnp::MessageReader> Read(BufferedMessageStream& stream,
                                     capnp::ReaderOptions options = {}) {
    KJ_IF_MAYBE (message, stream.tryReadMessage(nullptr, options, nullptr).wait(io_.waitScope)) {
      EXPECT_EQ(message->fds.size(), 0u);
      return kj::mv(message->reader);
    }
    ADD_FAILURE() << "end of stream where a message was expected";
    return kj::Own<capnp::MessageReader>();
  }

  std::string ReadError(BufferedMessageStream& stream, capnp::ReaderOptions options = {}) {
    KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
                   stream.tryReadMessage(nullptr, options, nullptr).wait(io_.waitScope);
                 })) {
      return e->getDescription().cStr();
    }
    return "";
  }

  std::unique_ptr<Loop> loop_;  // KJ's destructors may throw; a test fixture's may not
  kj::AsyncIoContext& io_;
  kj::TwoWayPipe& pipe_;
};

TEST_F(BufferedMessageStreamTest, ServesEveryMessageOfOneWriteAndThenTheEnd) {
  // Three small messages arrive in one write: all three are read, then the clean end.
  std::vector<kj::byte> bytes;
  for (uint8_t fill : {10, 20, 30}) {
    auto message = DataMessage(100 + fill, fill);
    bytes.insert(bytes.end(), message.asBytes().begin(), message.asBytes().end());
  }
  int seen = 0;
  BufferedMessageStream stream(*pipe_.ends[0], {.on_message = [&seen] { ++seen; }});
  SendRaw(kj::arrayPtr(bytes.data(), bytes.size()), bytes.size());
  pipe_.ends[1]->shutdownWrite();
  for (uint8_t fill : {10, 20, 30}) ExpectData(*Read(stream), 100 + fill, fill);
  EXPECT_EQ(stream.tryReadMessage(nullptr, {}, nullptr).wait(io_.waitScope), nullptr);
  EXPECT_EQ(seen, 3);
}

TEST_F(BufferedMessageStreamTest, AssemblesMessagesThatArriveInPieces) {
  // Two messages written 3 bytes at a time: the table and the body both arrive split.
  std::vector<kj::byte> bytes;
  for (uint8_t fill : {1, 2}) {
    auto message = DataMessage(300, fill);
    bytes.insert(bytes.end(), message.asBytes().begin(), message.asBytes().end());
  }
  BufferedMessageStream stream(*pipe_.ends[0]);
  auto first = stream.tryReadMessage(nullptr, {}, nullptr);
  SendRaw(kj::arrayPtr(bytes.data(), bytes.size()), 3);
  KJ_IF_MAYBE (message, first.wait(io_.waitScope)) {
    ExpectData(*message->reader, 300, 1);
  } else {
    FAIL() << "the first message did not arrive";
  }
  ExpectData(*Read(stream), 300, 2);
}

TEST_F(BufferedMessageStreamTest, ReadsMessagesOfManySegments) {
  size_t segments = 0;
  auto message = MultiSegmentMessage(200, segments);
  ASSERT_GT(segments, 10u);  // the builder's tiny fixed segments spread the lists out
  BufferedMessageStream stream(*pipe_.ends[0]);
  SendRaw(message.asBytes(), 1000);
  auto reader = Read(stream);
  auto outer = reader->getRoot<capnp::AnyPointer>().getAs<capnp::List<capnp::List<uint64_t>>>();
  ASSERT_EQ(outer.size(), 200u);
  for (unsigned i = 0; i < 200; ++i) {
    ASSERT_EQ(outer[i].size(), 16u);
    for (unsigned j = 0; j < 16; ++j) ASSERT_EQ(outer[i][j], i * 100 + j);
  }
}

TEST_F(BufferedMessageStreamTest, ReadsMessagesLargerThanTheBufferAndWhatFollows) {
  // A 1 MiB message through a 4 KiB buffer, then a small one right behind it.
  auto large = DataMessage(1 << 20, 7, 1 << 18);
  auto small = DataMessage(50, 9);
  std::vector<kj::byte> bytes(large.asBytes().begin(), large.asBytes().end());
  bytes.insert(bytes.end(), small.asBytes().begin(), small.asBytes().end());
  int seen = 0;
  BufferedMessageStream stream(*pipe_.ends[0],
                               {.buffer_bytes = 4096, .on_message = [&seen] { ++seen; }});
  auto first = stream.tryReadMessage(nullptr, {}, nullptr);
  SendRaw(kj::arrayPtr(bytes.data(), bytes.size()), 100'000);
  KJ_IF_MAYBE (message, first.wait(io_.waitScope)) {
    ExpectData(*message->reader, 1 << 20, 7);
  } else {
    FAIL() << "the large message did not arrive";
  }
  ExpectData(*Read(stream), 50, 9);
  EXPECT_EQ(seen, 2);
}

TEST_F(BufferedMessageStreamTest, WritesWhatTheStandardReaderReads) {
  BufferedMessageStream stream(*pipe_.ends[0]);
  capnp::MallocMessageBuilder builder;
  builder.initRoot<capnp::AnyPointer>().setAs<capnp::Text>("block 3 new");
  stream.writeMessage(builder).wait(io_.waitScope);
  auto reader = capnp::readMessage(*pipe_.ends[1]).wait(io_.waitScope);
  EXPECT_EQ(std::string(reader->getRoot<capnp::AnyPointer>().getAs<capnp::Text>().cStr()),
            "block 3 new");
}

TEST_F(BufferedMessageStreamTest, RefusesAMessageOverTheReceiversLimit) {
  BufferedMessageStream stream(*pipe_.ends[0]);
  capnp::ReaderOptions options;
  options.traversalLimitInWords = 64;  // 512 bytes
  auto message = DataMessage(1000, 0);
  SendRaw(message.asBytes(), message.asBytes().size());
  EXPECT_NE(ReadError(stream, options).find("larger than the receiver's limit"), std::string::npos);
}

TEST_F(BufferedMessageStreamTest, RefusesATableOfTooManySegments) {
  // A table claiming 600 segments of one word each.
  std::vector<kj::byte> bytes(8 + 600 * 4, 0);
  bytes[0] = static_cast<kj::byte>(599 & 0xff);
  bytes[1] = static_cast<kj::byte>(599 >> 8);
  BufferedMessageStream stream(*pipe_.ends[0]);
  SendRaw(kj::arrayPtr(bytes.data(), bytes.size()), bytes.size());
  EXPECT_NE(ReadError(stream).find("too many segments"), std::string::npos);
}

TEST_F(BufferedMessageStreamTest, AStreamThatEndsInsideAMessageIsAnError) {
  auto message = DataMessage(500, 3);
  BufferedMessageStream stream(*pipe_.ends[0]);
  SendRaw(message.asBytes().slice(0, 200), 200);
  pipe_.ends[1]->shutdownWrite();
  EXPECT_NE(ReadError(stream).find("closed the stream inside a message"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::rpc
