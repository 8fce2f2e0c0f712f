// SpliceWriter: a reply of copied and lent ranges arrives whole and in order over a TCP
// connection on loopback, through a socket that fills, and a dead peer is an error.
#include "services/store/stream/splice_writer.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

namespace kvtier::store {
namespace {

// A connected pair on loopback: `sender` non-blocking with a small send buffer, so that
// a reply of a few MiB fills it many times.
struct Connection {
  int sender = -1;
  int receiver = -1;
  Connection() {
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(listen(listener, 1), 0);
    EXPECT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
    receiver = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(receiver, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    sender = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK);
    close(listener);
    const int small = 64 * 1024;
    setsockopt(sender, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  }
  ~Connection() {
    if (sender >= 0) close(sender);
    if (receiver >= 0) close(receiver);
  }
};

// Writes the loaded reply, waiting for the socket whenever it is full; the writer's last
// result.
Result<bool> WriteAll(SpliceWriter& writer, int socket) {
  for (;;) {
    Result<bool> done = writer.Write(socket);
    if (!done.ok() || *done) return done;
    pollfd ready{socket, POLLOUT, 0};
    if (poll(&ready, 1, 5000) != 1) return UnavailableError("the socket stayed full for 5 s");
  }
}

// Reads `received.size()` bytes from `fd` into `received`, on a thread of its own (the
// writer fills the socket first).
std::thread ReadAll(int fd, std::vector<uint8_t>& received) {
  return std::thread([fd, &received] {
    size_t at = 0;
    while (at < received.size()) {
      const ssize_t n = read(fd, received.data() + at, received.size() - at);
      if (n <= 0) return;
      at += static_cast<size_t>(n);
    }
  });
}

std::vector<uint8_t> Pattern(size_t bytes, uint8_t seed) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(seed + i * 131 + (i >> 12));
  return out;
}

// A reply as the data stream sends a get: a 24-byte head and 8 state bytes (copied),
// then 3 MiB of page-aligned lent payload in 48 ranges (three times the pipe), a copied
// range between them, and lent bytes last. The reader gets every byte in order.
TEST(SpliceWriterTest, CopiedAndLentRangesArriveInOrderThroughAFullSocket) {
  Connection connection;
  std::unique_ptr<SpliceWriter> writer = SpliceWriter::Create().value();
  const std::vector<uint8_t> head = Pattern(24, 1), states = Pattern(8, 2),
                             middle = Pattern(100, 3);
  const size_t kRange = 64 * 1024;
  alignas(4096) static uint8_t lent[48 * kRange];
  const std::vector<uint8_t> lent_bytes = Pattern(sizeof(lent), 4);
  std::memcpy(lent, lent_bytes.data(), sizeof(lent));

  writer->Clear();
  writer->Add(head.data(), head.size(), /*lend=*/false);
  writer->Add(states.data(), states.size(), /*lend=*/false);
  for (size_t i = 0; i < 40; ++i) writer->Add(lent + i * kRange, kRange, /*lend=*/true);
  writer->Add(middle.data(), middle.size(), /*lend=*/false);
  writer->Add(lent + 40 * kRange, 8 * kRange, /*lend=*/true);
  std::vector<uint8_t> expected = head;
  expected.insert(expected.end(), states.begin(), states.end());
  expected.insert(expected.end(), lent_bytes.begin(), lent_bytes.begin() + 40 * kRange);
  expected.insert(expected.end(), middle.begin(), middle.end());
  expected.insert(expected.end(), lent_bytes.begin() + 40 * kRange, lent_bytes.end());

  std::vector<uint8_t> received(expected.size());
  std::thread reader = ReadAll(connection.receiver, received);
  const Result<bool> done = WriteAll(*writer, connection.sender);
  reader.join();
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(*done);
  EXPECT_EQ(writer->lent_bytes(), sizeof(lent));
  EXPECT_TRUE(received == expected) << "the reader got the reply's bytes out of order or changed";
}

// A writer carries reply after reply; the second is whole too (nothing of the first left
// in its pipe or its ranges).
TEST(SpliceWriterTest, ASecondReplyFollowsTheFirst) {
  Connection connection;
  std::unique_ptr<SpliceWriter> writer = SpliceWriter::Create().value();
  alignas(4096) static uint8_t pages[2][128 * 1024];
  std::memset(pages[0], 'a', sizeof(pages[0]));
  std::memset(pages[1], 'b', sizeof(pages[1]));
  std::vector<uint8_t> received(2 * sizeof(pages[0]));
  std::thread reader = ReadAll(connection.receiver, received);
  for (auto& page : pages) {
    writer->Clear();
    writer->Add(page, sizeof(page), /*lend=*/true);
    const Result<bool> done = WriteAll(*writer, connection.sender);
    ASSERT_TRUE(done.ok() && *done) << done.status();
    EXPECT_EQ(writer->lent_bytes(), sizeof(page)) << "lent_bytes counts the current reply only";
  }
  reader.join();
  EXPECT_EQ(std::count(received.begin(), received.begin() + sizeof(pages[0]), 'a'),
            sizeof(pages[0]));
  EXPECT_EQ(std::count(received.begin() + sizeof(pages[0]), received.end(), 'b'), sizeof(pages[1]));
}

// The reader went away: the write fails kUnavailable, naming the call, rather than
// waiting or raising SIGPIPE.
TEST(SpliceWriterTest, AClosedPeerIsUnavailable) {
  Connection connection;
  close(connection.receiver);
  connection.receiver = -1;
  std::unique_ptr<SpliceWriter> writer = SpliceWriter::Create().value();
  alignas(4096) static uint8_t pages[4 << 20];
  writer->Clear();
  writer->Add(pages, sizeof(pages), /*lend=*/true);
  Result<bool> done = WriteAll(*writer, connection.sender);
  EXPECT_EQ(done.status().code(), StatusCode::kUnavailable) << done.status();
  EXPECT_NE(done.status().message().find("splice into the socket"), std::string::npos)
      << done.status();
}

}  // namespace
}  // namespace kvtier::store
