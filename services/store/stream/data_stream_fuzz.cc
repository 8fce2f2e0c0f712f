// Fuzz target: a node's data stream server (protocol.h) over a loopback connection, the
// one place where kvtier parses bytes from other machines with no Cap'n Proto in front.
//
// The input's first byte (its low 7 bits modulo 5) picks how the connection starts, so
// that inputs reach past the ticket check, which a fuzzer cannot guess its way through:
//   0  nothing: the rest of the input is the whole stream (its requests name tickets
//      nobody opened, or sessions with guessed secrets);
//   1  the request of a fresh keyed get session (the rest: its keys head and keys); a
//      node's session when the first byte's high bit is set, whose replies are lent
//      zero copy to a head that acks;
//   2  the request of a fresh keyed put session (the rest: its headers head, headers and
//      payloads);
//   3  the request of a put ticket for two blocks (the rest: their payloads);
//   4  the request of a get ticket for the two blocks stored at start.
// Whatever follows the first transfer is read as later requests on the connection. The
// client then half-closes and reads to the end. Beyond no crash, no sanitizer report and
// no hang, each input must leave:
// - the answer empty or opening with a whole reply that carries the stream's magic;
// - the put ticket's blocks stored both or neither (a put is all or nothing);
// - the server holding no staging and no ticket once the connection is gone;
// - the server serving: a keyed get on a new connection answers.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "services/store/stream/data_stream_client.h"
#include "services/store/stream/data_stream_server.h"
#include "storage/testing/blocks.h"
#include "storage/testing/tiered_stores.h"
#include "tests/testing/fuzz_check.h"
#include "tests/testing/test_util.h"

namespace kvtier::store {
namespace {

using kvtier::testing::FuzzCheck;
using storage::testing::MakeBlock;
using storage::testing::TestBlock;

constexpr std::chrono::milliseconds kTicketTtl{10'000};
constexpr uint64_t kTicketScope = 99;  // the put ticket's blocks: no session may write there
constexpr size_t kBlockBytes = 4096;

// The node under test, made once per process (a server per input would fuzz its start-up).
// Its host tier holds four blocks (64 KiB pages), over a disk tier: blocks the fuzzer puts
// push the start's blocks down to disk, and transfers then read them there on the tier
// threads, as a store node's do.
struct Node {
  Node() {
    storage::TieredStoreOptions tiers =
        storage::testing::HostOverDisk(256 << 10, dir.path(), 16 << 20);
    tiers.disk->sync = storage::DiskSync::kNone;  // no figure is measured here: spare the disk
    store = storage::TieredStore::Create(std::move(tiers)).value();
    // Staging and block sizes far below the defaults: a header may claim anything.
    server = DataStreamServer::Create({.store = store.get(),
                                       .max_staged_bytes = 1 << 20,
                                       .max_block_bytes = 64 << 10,
                                       .ticket_ttl = kTicketTtl,
                                       .client_timeout = std::chrono::milliseconds(2'000),
                                       .threads = 1,
                                       .tier_threads = 1,
                                       .clock = &clock})
                 .value();
    for (uint64_t id : {1, 2}) stored.push_back(MakeBlock(id, kBlockBytes));
    for (const TestBlock& b : stored) {
      const storage::PutItem item{b.header, b.payload, /*checksum_checked=*/false};
      FuzzCheck(store->PutBatch(std::span(&item, 1))[0].ok(), "the start's blocks are stored");
    }
    for (uint64_t id : {11, 12}) put_blocks.push_back(MakeBlock(id, kBlockBytes, 50, kTicketScope));
  }
  ~Node() {
    server->Shutdown();
    server.reset();
    store.reset();
  }

  kvtier::testing::TempDir dir;  // the disk tier's; removed after the store closes
  FakeClock clock;  // the tickets' and sessions' time: moved past their ttl after each input
  std::unique_ptr<storage::TieredStore> store;
  std::unique_ptr<DataStreamServer> server;
  std::vector<TestBlock> stored, put_blocks;
};

TransferTicket GetSession(Node& node, bool node_session) {
  return node.server
      ->OpenSession({.format_tag = storage::testing::kFormat,
                     .salt_scope = storage::testing::kScope,
                     .any_scope = node_session})
      .value();
}

// The ticket the input's first byte names, and its op; nullopt for none.
std::optional<std::pair<TransferTicket, StreamOp>> OpenFirst(Node& node, uint8_t mode) {
  switch ((mode & 0x7F) % 5) {
    case 1: return std::pair{GetSession(node, (mode & 0x80) != 0), StreamOp::kGetKeys};
    case 2:
      return std::pair{
          node.server
              ->OpenSession({.op = StreamOp::kPutHeaders, .salt_scope = storage::testing::kScope})
              .value(),
          StreamOp::kPutHeaders};
    case 3:
      return std::pair{
          node.server->OpenPut({node.put_blocks[0].header, node.put_blocks[1].header}).value(),
          StreamOp::kPut};
    case 4: {
      const std::vector<BlockKey> keys = {node.stored[0].header.key, node.stored[1].header.key};
      return std::pair{
          node.server->OpenGet(keys, storage::testing::kFormat, storage::testing::kScope, nullptr)
              .value()
              .ticket,
          StreamOp::kGet};
    }
    default: return std::nullopt;
  }
}

// Sends `bytes` on a new connection to `address`, half-closes, and returns all the node
// sent until it closed. A node still sending after 10 s fails the property it hangs.
std::string Exchange(const std::string& address, const std::string& bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
  FuzzCheck(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0,
            "the node accepts a connection");
  // The node may close before taking every byte (a refused request): a short send is fine.
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string received;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  char buffer[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    FuzzCheck(std::chrono::steady_clock::now() < deadline && poll(&p, 1, 100) >= 0,
              "the node closes a connection whose client has sent all it had");
    if (p.revents == 0) continue;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;  // closed, or reset after a refusal
    received.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return received;
}

// Waits (up to 5 s) until the node holds no staging and no ticket.
bool Drained(Node& node) {
  for (int i = 0; i < 5000; ++i) {
    const DataStreamStats stats = node.server->Stats();
    if (stats.staged_bytes == 0 && stats.tickets_open == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

void CheckAfter(Node& node, const std::string& answer) {
  StreamReply reply;
  FuzzCheck(answer.empty() || answer.size() >= sizeof(reply), "an answer holds a whole reply head");
  if (!answer.empty()) {
    std::memcpy(&reply, answer.data(), sizeof(reply));
    FuzzCheck(reply.magic == kStreamMagic, "a reply carries the stream's magic");
    FuzzCheck(reply.message_bytes <= kMaxStreamMessageBytes, "a refusal's message is bounded");
  }
  const bool first = node.store->Contains(node.put_blocks[0].ref());
  const bool second = node.store->Contains(node.put_blocks[1].ref());
  FuzzCheck(first == second, "a put ticket's blocks are stored both or neither");
  for (const TestBlock& b : node.put_blocks)
    (void)node.store->Remove(b.ref());  // the next input starts alike
  FuzzCheck(Drained(node), "a closed connection leaves no staging and no ticket behind");
  auto client = DataStreamClient::Connect(
      {.address = node.server->address(), .timeout = std::chrono::seconds(10)});
  FuzzCheck(client.ok(), "the node still accepts connections");
  std::vector<uint8_t> out;
  const std::vector<BlockKey> keys = {node.stored[0].header.key};
  const auto got = (*client)->GetKeys(GetSession(node, /*node_session=*/true), keys,
                                      [&](size_t, const storage::BlockHeader& header) {
                                        out.resize(header.payload_bytes);
                                        return std::span<uint8_t>(out);
                                      });
  FuzzCheck(got.ok(), "the node still serves a keyed get");
  // The node frees the get's staging once its send has completed, a moment after the
  // client has every byte: the next input's ticket would find it taken.
  FuzzCheck(Drained(node), "a keyed get leaves no staging behind");
  // Every session and ticket of this input goes idle for the next one (swept each second).
  node.clock.Advance(kTicketTtl);
}

}  // namespace
}  // namespace kvtier::store

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier::store;
  static Node node;
  std::string bytes;
  if (size > 0) {
    if (const auto first = OpenFirst(node, data[0])) {
      const StreamRequest request{.op = static_cast<uint32_t>(first->second),
                                  .ticket_id = first->first.id,
                                  .secret = first->first.secret};
      bytes.assign(reinterpret_cast<const char*>(&request), sizeof(request));
    }
    bytes.append(reinterpret_cast<const char*>(data + 1), size - 1);
  }
  CheckAfter(node, Exchange(node.server->address(), bytes));
  return 0;
}
