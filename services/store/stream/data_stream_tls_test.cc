// The data stream over TLS: tickets, keyed gets (pipelined) and keyed puts move every
// byte through a relay that records the wire, and none of it is plaintext; a client
// that does not verify the node, or speaks plaintext, is refused and leaves its ticket
// unused, and one refused mid-payload reads the node's reason; an unproven connection that never
// finishes its handshake is closed at the first-request deadline.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "common/tls_context.h"
#include "services/store/stream/testing/data_stream_fixture.h"
#include "storage/testing/tiered_stores.h"
#include "tests/testing/test_util.h"

namespace kvtier::store {
namespace {

using storage::testing::kScope;
using storage::testing::MakeBlock;
using storage::testing::TestBlock;

// Relays one connection from its own loopback port to `target`, recording the bytes of
// both directions.
class RecordingRelay {
 public:
  explicit RecordingRelay(const std::string& target) : target_(target) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(listen(listener_, 1), 0);
    socklen_t len = sizeof(address);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &len);
    address_ = "127.0.0.1:" + std::to_string(ntohs(address.sin_port));
    thread_ = std::thread([this] { Pump(); });
  }
  ~RecordingRelay() {
    stop_ = true;
    thread_.join();
    close(listener_);
  }
  const std::string& address() const { return address_; }
  // Whether `needle` appears in what went either way. REQUIRES: the relay's connection closed.
  bool Saw(const std::vector<uint8_t>& needle) {
    thread_.join();
    thread_ = std::thread([] {});
    for (const std::vector<uint8_t>* wire : {&to_server_, &to_client_}) {
      if (std::search(wire->begin(), wire->end(), needle.begin(), needle.end()) != wire->end())
        return true;
    }
    return false;
  }
  size_t bytes() const { return to_server_.size() + to_client_.size(); }

 private:
  void Pump() {
    pollfd accepting{listener_, POLLIN, 0};
    while (!stop_ && poll(&accepting, 1, 50) == 0) {
    }
    if (stop_) return;
    const int client = accept(listener_, nullptr, nullptr);
    const int server = testing::ConnectRaw(target_);
    pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
    std::vector<uint8_t> buffer(1 << 16);
    for (bool open = true; open && !stop_;) {
      if (poll(fds, 2, 50) <= 0) continue;
      for (int side = 0; side < 2 && open; ++side) {
        if (fds[side].revents == 0) continue;
        const ssize_t n = read(fds[side].fd, buffer.data(), buffer.size());
        if (n <= 0) {
          open = false;
          break;
        }
        std::vector<uint8_t>& wire = side == 0 ? to_server_ : to_client_;
        wire.insert(wire.end(), buffer.begin(), buffer.begin() + n);
        for (ssize_t sent = 0; sent < n;) {
          const ssize_t w = write(fds[1 - side].fd, buffer.data() + sent, n - sent);
          if (w <= 0) break;
          sent += w;
        }
      }
    }
    close(client);
    close(server);
  }

  std::string target_, address_;
  int listener_ = -1;
  std::atomic<bool> stop_{false};
  std::vector<uint8_t> to_server_, to_client_;
  std::thread thread_;
};

class DataStreamTlsTest : public DataStreamFixture {
 protected:
  void SetUp() override {
    ASSERT_EQ(testing::MakeTestCertificates(dir_.path()), "");
    DataStreamServerOptions options;
    options.tls = MakeTlsServerContext(dir_.File("server.pem"), dir_.File("server.key")).value();
    options.first_request_deadline = std::chrono::milliseconds(300);
    StartNode(storage::testing::HostOnly(64ull << 20), options);
    ca_ = MakeTlsClientContext(dir_.File("ca.pem")).value();
  }

  Result<std::unique_ptr<DataStreamClient>> TlsClient(const std::string& address,
                                                      TlsContextPtr ca = nullptr,
                                                      const std::string& name = "") {
    return DataStreamClient::Connect({.address = address,
                                      .timeout = std::chrono::seconds(10),
                                      .tls = ca != nullptr ? ca : ca_,
                                      .tls_server_name = name});
  }

  testing::TempDir dir_;
  TlsContextPtr ca_;
};

TEST_F(DataStreamTlsTest, TicketsAndKeyedTransfersMoveEveryByteAndNoneInPlaintext) {
  EXPECT_TRUE(server_->Stats().encrypted);
  EXPECT_FALSE(server_->Stats().lends_pages);
  // A ticket's put of three blocks (one of 3 MiB), then its get, through the relay.
  const std::vector<TestBlock> blocks{MakeBlock(1, 3u << 20), MakeBlock(2, 100),
                                      MakeBlock(3, 64 * 1024)};
  RecordingRelay relay(server_->address());
  {
    auto client = TlsClient(relay.address(), nullptr, "127.0.0.1");
    ASSERT_TRUE(client.ok()) << client.status();
    std::vector<storage::BlockHeader> headers;
    std::vector<std::span<const uint8_t>> payloads;
    for (const TestBlock& b : blocks) {
      headers.push_back(b.header);
      payloads.emplace_back(b.payload);
    }
    const TransferTicket put = server_->OpenPut(headers).value();
    Result<uint32_t> stored = (*client)->Put(put, payloads);
    ASSERT_TRUE(stored.ok()) << stored.status();
    EXPECT_EQ(*stored, 3u);

    std::vector<BlockKey> keys;
    for (const TestBlock& b : blocks) keys.push_back(b.header.key);
    const StreamGetOpened opened =
        server_->OpenGet(keys, storage::testing::kFormat, kScope, nullptr).value();
    std::vector<std::vector<uint8_t>> got;
    for (const TestBlock& b : blocks) got.emplace_back(b.payload.size());
    std::vector<std::span<uint8_t>> outs(got.begin(), got.end());
    auto states = (*client)->Get(opened.ticket, outs);
    ASSERT_TRUE(states.ok()) << states.status();
    for (size_t i = 0; i < blocks.size(); ++i) {
      EXPECT_EQ((*states)[i], StreamBlockState::kPresent);
      EXPECT_EQ(got[i], blocks[i].payload) << "block " << i;
    }

    // Keyed gets, two pipelined, under a node's session, and a keyed put.
    const TransferTicket session = server_
                                       ->OpenSession({.op = StreamOp::kGetKeys,
                                                      .format_tag = storage::testing::kFormat,
                                                      .salt_scope = kScope,
                                                      .any_scope = true})
                                       .value();
    ASSERT_TRUE((*client)->SendGetKeys(session, std::span(keys).first(1)).ok());
    ASSERT_TRUE((*client)->SendGetKeys(session, std::span(keys).subspan(1)).ok());
    std::vector<uint8_t> first(blocks[0].payload.size());
    auto one = (*client)->ReceiveGetKeys(
        [&](size_t, const storage::BlockHeader&) { return std::span<uint8_t>(first); });
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ(first, blocks[0].payload);
    std::vector<std::vector<uint8_t>> rest(2);
    auto two = (*client)->ReceiveGetKeys([&](size_t i, const storage::BlockHeader& header) {
      rest[i].resize(header.payload_bytes);
      return std::span<uint8_t>(rest[i]);
    });
    ASSERT_TRUE(two.ok()) << two.status();
    EXPECT_EQ(rest[0], blocks[1].payload);
    EXPECT_EQ(rest[1], blocks[2].payload);

    const TestBlock keyed = MakeBlock(4, 256 * 1024);
    const TransferTicket put_session = server_
                                           ->OpenSession({.op = StreamOp::kPutHeaders,
                                                          .format_tag = storage::testing::kFormat,
                                                          .salt_scope = kScope})
                                           .value();
    const std::span<const uint8_t> keyed_payload(keyed.payload);
    Result<uint32_t> keyed_stored = (*client)->PutBlocks(put_session, std::span(&keyed.header, 1),
                                                         std::span(&keyed_payload, 1));
    ASSERT_TRUE(keyed_stored.ok()) << keyed_stored.status();
    EXPECT_EQ(*keyed_stored, 1u);
    std::vector<uint8_t> back(keyed.payload.size());
    EXPECT_TRUE(store_->Get(keyed.ref(), back).ok());
    EXPECT_EQ(back, keyed.payload);
  }
  // The wire carried about every payload's size in ciphertext, and no 64-byte piece of any
  // payload, nor a ticket's secret.
  EXPECT_GT(relay.bytes(), (3u << 20) * 2);
  for (const TestBlock& b : blocks) {
    const std::vector<uint8_t> piece(b.payload.begin() + 16, b.payload.begin() + 80);
    EXPECT_FALSE(relay.Saw(piece)) << "a piece of block " << b.header.key.lo << " in plaintext";
  }
}

TEST_F(DataStreamTlsTest, AClientThatCannotVerifyTheNodeIsRefusedByName) {
  // A CA that did not sign the node's certificate.
  auto stranger = MakeTlsClientContext(dir_.File("stranger.pem")).value();
  auto untrusted = TlsClient(server_->address(), stranger);
  ASSERT_FALSE(untrusted.ok());
  EXPECT_EQ(untrusted.status().code(), StatusCode::kUnauthenticated) << untrusted.status();
  EXPECT_NE(untrusted.status().message().find("not trusted"), std::string::npos)
      << untrusted.status();
  // The node's certificate names kvtier.test and 127.0.0.1, not other.test.
  auto misnamed = TlsClient(server_->address(), nullptr, "other.test");
  ASSERT_FALSE(misnamed.ok());
  EXPECT_EQ(misnamed.status().code(), StatusCode::kUnauthenticated) << misnamed.status();
  EXPECT_NE(misnamed.status().message().find("hostname mismatch"), std::string::npos)
      << misnamed.status();
  EXPECT_TRUE(TlsClient(server_->address(), nullptr, "kvtier.test").ok());
}

TEST_F(DataStreamTlsTest, APlaintextClientIsRefusedAndItsTicketStaysUnused) {
  const TestBlock block = MakeBlock(7, 4096);
  ASSERT_TRUE(store_->Put(block.header, block.payload).ok());
  const StreamGetOpened opened =
      server_->OpenGet(std::span(&block.header.key, 1), storage::testing::kFormat, kScope, nullptr)
          .value();
  std::vector<uint8_t> got(block.payload.size());
  std::vector<std::span<uint8_t>> outs{got};
  auto plain = DataStreamClient::Connect(
      {.address = server_->address(), .timeout = std::chrono::seconds(5)});
  ASSERT_TRUE(plain.ok()) << plain.status();  // TCP connects; the request is no TLS handshake
  auto refused = (*plain)->Get(opened.ticket, outs);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status();
  EXPECT_EQ(server_->Stats().gets, 0u);
  auto client = TlsClient(server_->address());
  ASSERT_TRUE(client.ok()) << client.status();
  auto states = (*client)->Get(opened.ticket, outs);
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ(got, block.payload);
}

// The node refuses at the request and reads the rest of the payload away (Linger), so the
// client, still sending 3 MiB, then reads the node's own refusal over TLS.
TEST_F(DataStreamTlsTest, APutRefusedMidPayloadGetsTheNodesReason) {
  const TestBlock block = MakeBlock(9, 3u << 20);
  const TransferTicket ticket = server_->OpenPut({block.header}).value();
  TransferTicket guessed = ticket;
  guessed.secret ^= 1;
  const std::span<const uint8_t> payload(block.payload);
  auto client = TlsClient(server_->address());
  ASSERT_TRUE(client.ok()) << client.status();
  const auto refused = (*client)->Put(guessed, std::span(&payload, 1));
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << refused.status();
  auto owner = TlsClient(server_->address());
  ASSERT_TRUE(owner.ok()) << owner.status();
  EXPECT_TRUE((*owner)->Put(ticket, std::span(&payload, 1)).ok());
}

TEST_F(DataStreamTlsTest, ATlsClientOfAPlaintextStreamFailsItsHandshake) {
  DataStreamServerOptions plaintext;
  plaintext.store = store_.get();
  auto plain_server = DataStreamServer::Create(plaintext).value();
  auto client = TlsClient(plain_server->address());
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable) << client.status();
  EXPECT_NE(client.status().message().find("TLS handshake failed"), std::string::npos)
      << client.status();
}

TEST_F(DataStreamTlsTest, AHandshakeNeverFinishedIsClosedAtTheFirstRequestDeadline) {
  // Half a ClientHello's record header, then nothing.
  const int fd = testing::ConnectRaw(server_->address());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(send(fd, "\x16\x03\x01", 3, 0), 3);
  pollfd p{fd, POLLIN, 0};
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(poll(&p, 1, 5'000), 1) << "still open 5 s later";
  char byte;
  EXPECT_LE(recv(fd, &byte, 1, 0), 0);  // closed, nothing sent
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  close(fd);
}

}  // namespace
}  // namespace kvtier::store
