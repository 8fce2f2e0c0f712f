#include "services/bench/rpc/transfer_client.h"

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <random>
#include <span>
#include <stdexcept>

#include "common/thread_name.h"
#include "services/rpc/schema/kvtier.capnp.h"
#include "services/rpc/tls.h"
#include "services/store/rpc/block_header_wire.h"
#include "services/store/stream/data_stream_client.h"
#include "storage/block_header.h"

namespace kvtier::bench {
namespace {

using store::DataStreamClient;
using store::FromWire;
using store::StreamBlockState;
using store::TransferTicket;

namespace schema = kvtier::rpc::schema;
using Clock = std::chrono::steady_clock;

constexpr char kFormat[] = "bench|transfer";

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Block `id`'s payload: the client's random template with the id in its first 8 bytes.
// Making one is a memcpy, as hiredis's copy of a value into its output buffer is, so the
// timed phases cost the clients what the Redis phases cost them.
void MakePayload(const std::vector<uint8_t>& base, uint64_t id, std::span<uint8_t> out) {
  std::memcpy(out.data(), base.data(), out.size());
  std::memcpy(out.data(), &id, std::min<size_t>(sizeof(id), out.size()));
}

constexpr uint64_t kKeyHi = 0xBE7C;  // block id's key: (kKeyHi, id)
void SetKey(schema::BlockKey::Builder key, uint64_t id) {
  key.setHi(kKeyHi);
  key.setLo(id);
}

void SetHeader(schema::BlockHeader::Builder header, uint64_t id, const TransferBenchOptions& o,
               uint64_t checksum) {
  SetKey(header.initKey(), id);
  header.setFirstInChain(true);
  header.setFormatTag(kFormat);
  header.setPayloadBytes(o.block_bytes);
  header.setChecksum(checksum);
}

// Blocks first .. first + n - 1, in a get's or an openGet's params.
template <typename Params>
void AskFor(Params& request, uint64_t first, unsigned n) {
  auto keys = request.initKeys(n);
  for (unsigned i = 0; i < n; ++i) SetKey(keys[i], first + i);
  request.setFormatTag(kFormat);
}

// Throws unless block `id` came back present with the block size and, when `verify`,
// byte for byte as it was made (`expected`: scratch of the block size).
void CheckBlock(bool present, std::span<const uint8_t> bytes, uint64_t id,
                const TransferBenchOptions& o, const std::vector<uint8_t>& base, bool verify,
                std::vector<uint8_t>& expected) {
  bool right = present && bytes.size() == o.block_bytes;
  if (right && verify) {
    MakePayload(base, id, expected);
    right = std::memcmp(bytes.data(), expected.data(), expected.size()) == 0;
  }
  if (!right) throw std::runtime_error("block " + std::to_string(id) + " came back wrong");
}

// A client's end of the data stream: one connection, and the buffers its blocks are made
// in (put) or land in (get), reused from call to call.
struct StreamSide {
  std::unique_ptr<DataStreamClient> connection;
  std::vector<uint8_t> buffer;
  TlsContextPtr tls;  // set: the stream is TLS, verified for tls_server_name
  std::string tls_server_name;

  Result<DataStreamClient*> Connect(const TransferTicket& ticket) {
    if (connection == nullptr) {
      KVTIER_ASSIGN_OR_RETURN(
          connection,
          DataStreamClient::Connect(
              {.address = ticket.data_address, .tls = tls, .tls_server_name = tls_server_name}));
    }
    return connection.get();
  }
  std::span<uint8_t> Block(uint64_t i, uint64_t bytes) {
    return std::span<uint8_t>(buffer).subspan(i * bytes, bytes);
  }
};

template <typename T>
T OrThrow(Result<T> result) {
  if (!result.ok()) throw std::runtime_error(result.status().ToString());
  return std::move(*result);
}

// Keyed puts: one put session, then each put's headers on the stream.
void KeyedPutAll(schema::BlockStore::Client& store, kj::WaitScope& wait,
                 const TransferBenchOptions& o, ClientWork& work, const std::vector<uint8_t>& base,
                 const std::vector<uint64_t>& checksums, StreamSide& side) {
  const auto opened = Clock::now();
  const TransferTicket session =
      FromWire(store.openPutSessionRequest().send().wait(wait).getTicket());
  work.put_open_ms += MsSince(opened);
  DataStreamClient& connection = *OrThrow(side.Connect(session));
  std::vector<storage::BlockHeader> headers;
  std::vector<std::span<const uint8_t>> payloads;
  for (uint64_t b = 0; b < work.blocks; b += o.batch) {
    const auto n = static_cast<unsigned>(std::min<uint64_t>(o.batch, work.blocks - b));
    const auto start = Clock::now();
    headers.resize(n);
    payloads.clear();
    for (unsigned i = 0; i < n; ++i) {
      const uint64_t id = work.first_block + b + i;
      headers[i].key = {kKeyHi, id};
      headers[i].first_in_chain = true;
      headers[i].format_tag = kFormat;
      headers[i].payload_bytes = o.block_bytes;
      headers[i].checksum = checksums[b + i];
      MakePayload(base, id, side.Block(i, o.block_bytes));
      payloads.push_back(side.Block(i, o.block_bytes));
    }
    if (OrThrow(connection.PutBlocks(session, headers, payloads)) != n)
      throw std::runtime_error("put short");
    work.put_ms.push_back(MsSince(start));
  }
}

void StreamPutAll(schema::BlockStore::Client& store, kj::WaitScope& wait,
                  const TransferBenchOptions& o, ClientWork& work, const std::vector<uint8_t>& base,
                  const std::vector<uint64_t>& checksums, StreamSide& side) {
  if (o.keyed_puts) return KeyedPutAll(store, wait, o, work, base, checksums, side);
  std::vector<std::span<const uint8_t>> payloads;
  for (uint64_t b = 0; b < work.blocks; b += o.batch) {
    const auto n = static_cast<unsigned>(std::min<uint64_t>(o.batch, work.blocks - b));
    const auto start = Clock::now();
    auto request = store.openPutRequest();
    auto headers = request.initHeaders(n);
    payloads.clear();
    for (unsigned i = 0; i < n; ++i) {
      const uint64_t id = work.first_block + b + i;
      SetHeader(headers[i], id, o, checksums[b + i]);
      MakePayload(base, id, side.Block(i, o.block_bytes));
      payloads.push_back(side.Block(i, o.block_bytes));
    }
    const TransferTicket ticket = FromWire(request.send().wait(wait).getTicket());
    work.put_open_ms += MsSince(start);
    if (OrThrow(OrThrow(side.Connect(ticket))->Put(ticket, payloads)) != n)
      throw std::runtime_error("put short");
    work.put_ms.push_back(MsSince(start));
  }
}

// Keyed gets: one get session, then each get's keys on the stream, `gets_in_flight` of
// them sent ahead of the reply read. Replies are read one at a time, each checked before
// the next is read, so one batch's buffer serves them all.
void KeyedGetAll(schema::BlockStore::Client& store, kj::WaitScope& wait,
                 const TransferBenchOptions& o, ClientWork& work, const std::vector<uint8_t>& base,
                 bool verify, StreamSide& side) {
  const auto opened = Clock::now();
  auto request = store.openGetSessionRequest();
  request.setFormatTag(kFormat);
  const TransferTicket session = FromWire(request.send().wait(wait).getTicket());
  if (!verify) work.get_open_ms += MsSince(opened);
  DataStreamClient& connection = *OrThrow(side.Connect(session));
  const uint64_t depth = o.gets_in_flight;
  std::vector<uint8_t> expected(o.block_bytes);
  std::vector<BlockKey> keys;
  struct Sent {
    uint64_t first;  // of the client's blocks
    unsigned n;
    Clock::time_point at;
  };
  std::deque<Sent> sent;
  uint64_t next = 0;
  const auto send = [&] {
    const auto n = static_cast<unsigned>(std::min<uint64_t>(o.batch, work.blocks - next));
    keys.clear();
    for (unsigned i = 0; i < n; ++i) keys.push_back({kKeyHi, work.first_block + next + i});
    sent.push_back({next, n, Clock::now()});
    if (const Status status = connection.SendGetKeys(session, keys); !status.ok()) {
      throw std::runtime_error(status.ToString());
    }
    next += n;
  };
  while (next < work.blocks || !sent.empty()) {
    while (next < work.blocks && sent.size() < depth) send();
    const Sent get = sent.front();
    sent.pop_front();
    const DataStreamClient::KeyedGet got =
        OrThrow(connection.ReceiveGetKeys([&](size_t i, const storage::BlockHeader& header) {
          // A block of another size is refused by the client (its buffer would not fit).
          return header.payload_bytes == o.block_bytes ? side.Block(i, o.block_bytes)
                                                       : std::span<uint8_t>();
        }));
    if (!verify) work.get_ms.push_back(MsSince(get.at));
    for (unsigned i = 0; i < get.n; ++i) {
      CheckBlock(got.states[i] == StreamBlockState::kPresent, side.Block(i, o.block_bytes),
                 work.first_block + get.first + i, o, base, verify, expected);
    }
  }
}

void StreamGetAll(schema::BlockStore::Client& store, kj::WaitScope& wait,
                  const TransferBenchOptions& o, ClientWork& work, const std::vector<uint8_t>& base,
                  bool verify, StreamSide& side) {
  if (o.keyed_gets) return KeyedGetAll(store, wait, o, work, base, verify, side);
  std::vector<uint8_t> expected(o.block_bytes);
  std::vector<std::span<uint8_t>> outs;
  for (uint64_t b = 0; b < work.blocks; b += o.batch) {
    const auto n = static_cast<unsigned>(std::min<uint64_t>(o.batch, work.blocks - b));
    const auto start = Clock::now();
    auto request = store.openGetRequest();
    AskFor(request, work.first_block + b, n);
    auto response = request.send().wait(wait);
    if (!verify) work.get_open_ms += MsSince(start);
    outs.clear();
    for (unsigned i = 0; i < n; ++i) {
      const bool present = response.getStates()[i] == schema::BlockState::PRESENT;
      outs.push_back(side.Block(i, present ? o.block_bytes : 0));
    }
    const TransferTicket ticket = FromWire(response.getTicket());
    const std::vector<StreamBlockState> states =
        OrThrow(OrThrow(side.Connect(ticket))->Get(ticket, outs));
    if (!verify) work.get_ms.push_back(MsSince(start));
    for (unsigned i = 0; i < n; ++i) {
      CheckBlock(states[i] == StreamBlockState::kPresent, outs[i], work.first_block + b + i, o,
                 base, verify, expected);
    }
  }
}

void PutAll(schema::BlockStore::Client& store, kj::WaitScope& wait, const TransferBenchOptions& o,
            ClientWork& work, const std::vector<uint8_t>& base,
            const std::vector<uint64_t>& checksums) {
  for (uint64_t b = 0; b < work.blocks; b += o.batch) {
    const auto n = static_cast<unsigned>(std::min<uint64_t>(o.batch, work.blocks - b));
    const auto start = Clock::now();
    auto request = store.putRequest();
    auto blocks = request.initBlocks(n);
    for (unsigned i = 0; i < n; ++i) {
      const uint64_t id = work.first_block + b + i;
      SetHeader(blocks[i].initHeader(), id, o, checksums[b + i]);
      auto data = blocks[i].initData(static_cast<unsigned>(o.block_bytes));  // written in place
      MakePayload(base, id, std::span<uint8_t>(data.begin(), data.size()));
    }
    request.send().wait(wait);
    work.put_ms.push_back(MsSince(start));
  }
}

// Gets every block of the client; `verify`: compare every byte (the untimed pass), else
// check state and size only, as the Redis phase does.
void GetAll(schema::BlockStore::Client& store, kj::WaitScope& wait, const TransferBenchOptions& o,
            ClientWork& work, const std::vector<uint8_t>& base, bool verify) {
  std::vector<uint8_t> expected(o.block_bytes);
  for (uint64_t b = 0; b < work.blocks; b += o.batch) {
    const auto n = static_cast<unsigned>(std::min<uint64_t>(o.batch, work.blocks - b));
    const auto start = Clock::now();
    auto request = store.getRequest();
    AskFor(request, work.first_block + b, n);
    auto response = request.send().wait(wait);
    if (!verify) work.get_ms.push_back(MsSince(start));
    for (unsigned i = 0; i < n; ++i) {
      const auto data = response.getBlocks()[i].getData();
      CheckBlock(response.getStates()[i] == schema::BlockState::PRESENT,
                 {data.begin(), data.size()}, work.first_block + b + i, o, base, verify, expected);
    }
  }
}

}  // namespace

// One client: its payloads' checksums (before any timing), the put phase, the timed get
// phase, then an untimed get of every block again that compares every byte.
void RunTransferClient(const std::string& address, const TransferBenchOptions& o, ClientWork& work,
                       Phases& phases) {
  NameThisThread("bench-client-" + std::to_string(work.index));
  std::atomic<int>* const barriers[] = {&phases.ready, &phases.put_done, &phases.get_done};
  size_t passed = 0;
  auto arrive = [&] { Phases::Arrive(*barriers[passed++]); };
  try {
    capnp::ReaderOptions reader;
    reader.traversalLimitInWords = (o.block_bytes * o.batch * 2) / 8 + (1 << 20);
    kj::AsyncIoContext io = kj::setupAsyncIo();
    auto& wait = io.waitScope;
    kj::Own<kj::AsyncIoStream> connection =
        io.provider->getNetwork().parseAddress(address).wait(wait)->connect().wait(wait);
    std::unique_ptr<rpc::TlsClient> tls;
    if (o.tls()) {
      tls = OrThrow(rpc::TlsClient::Create(o.tls_ca_file));
      connection = tls->Wrap(kj::mv(connection), o.tls_server_name).wait(wait);
    }
    capnp::TwoPartyVatNetwork network(*connection, capnp::rpc::twoparty::Side::CLIENT, reader);
    auto rpc_system = capnp::makeRpcClient(network);
    capnp::MallocMessageBuilder vat_message(8);
    auto server_id = vat_message.initRoot<capnp::rpc::twoparty::VatId>();
    server_id.setSide(capnp::rpc::twoparty::Side::SERVER);
    auto auth = rpc_system.bootstrap(server_id).castAs<schema::Bootstrap>().authenticateRequest();
    auth.setToken("bench");
    auto session = auth.send().wait(wait).getSession();
    schema::BlockStore::Client store = session.storeRequest().send().wait(wait).getStore();
    std::vector<uint8_t> base(o.block_bytes);
    std::mt19937_64 rng(work.index + 1);
    for (uint8_t& byte : base) byte = static_cast<uint8_t>(rng());
    std::vector<uint64_t> checksums(work.blocks);
    std::vector<uint8_t> payload(o.block_bytes);
    for (uint64_t b = 0; b < work.blocks; ++b) {
      MakePayload(base, work.first_block + b, payload);
      checksums[b] = storage::PayloadChecksum(payload);
    }
    StreamSide side;
    side.buffer.resize(o.block_bytes * o.batch);
    if (o.tls() && o.stream) {
      side.tls = OrThrow(MakeTlsClientContext(o.tls_ca_file));
      side.tls_server_name = o.tls_server_name;
    }
    arrive();  // ready
    phases.go_put.wait(false);
    if (o.stream) {
      StreamPutAll(store, wait, o, work, base, checksums, side);
    } else {
      PutAll(store, wait, o, work, base, checksums);
    }
    arrive();  // put_done
    phases.go_get.wait(false);
    for (const bool verify : {false, true}) {  // the timed pass, then the byte-for-byte one
      if (o.stream) {
        StreamGetAll(store, wait, o, work, base, verify, side);
      } else {
        GetAll(store, wait, o, work, base, verify);
      }
      if (verify) break;
      arrive();  // get_done
      phases.go_verify.wait(false);
    }
  } catch (const std::exception& e) {
    work.error = e.what();
    while (passed < std::size(barriers)) arrive();  // the others wait for this client at each
  }
}

}  // namespace kvtier::bench
