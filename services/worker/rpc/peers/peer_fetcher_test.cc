// PeerFetcher against a real coordinator and a peer whose BlockStore is scripted here,
// without a data stream, with one that serves tickets only (openGet: a worker), and with
// one that serves get sessions too (keyed gets, the blocks in its tiers: a store). It
// resolves the peer at the coordinator, takes the
// leading run of good blocks, refuses a block whose payload does not match its checksum
// (and what follows it), and treats an unknown node as holding nothing.
#include "services/worker/rpc/peers/peer_fetcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <kj/async-io.h>

#include "services/rpc/schema/kvtier.capnp.h"
#include "services/rpc/schema_convert.h"
#include "services/store/rpc/block_header_wire.h"
#include "services/store/stream/data_stream_server.h"
#include "services/worker/rpc/peers/node_connections.h"
#include "services/worker/rpc/peers/peer_node_testing.h"
#include "storage/block_header.h"
#include "tests/testing/test_util.h"

namespace kvtier::worker {
namespace {

namespace schema = kvtier::rpc::schema;
constexpr uint64_t kBlockBytes = 64;
constexpr uint64_t kScope = 77;
const char* const kFormat = "L1/H1/D8/T4/fp16/W0/S0|f0000000000000000";

// Block `key` of the scripted peer: filled with byte key.lo; the block whose fill is
// `corrupt_fill` has its payload changed after its checksum was taken.
storage::BlockHeader ScriptedBlock(const storage::BlockRef& ref, int corrupt_fill,
                                   std::vector<uint8_t>& payload) {
  const uint8_t fill = static_cast<uint8_t>(ref.key.lo);
  payload.assign(kBlockBytes, fill);
  storage::BlockHeader header;
  header.key = ref.key;
  header.salt_scope = ref.salt_scope;
  header.format_tag = std::string(ref.format_tag);
  header.payload_bytes = kBlockBytes;
  header.checksum = storage::PayloadChecksum(payload);
  if (fill == corrupt_fill) payload[5] ^= 1;
  return header;
}

// The same blocks as an ExtraBlockSource, for the data stream's openGet.
class ScriptedSource final : public store::ExtraBlockSource {
 public:
  explicit ScriptedSource(int corrupt_fill) : corrupt_fill_(corrupt_fill) {}
  Result<storage::BlockHeader> Peek(const storage::BlockRef& ref) override {
    std::vector<uint8_t> payload;
    return ScriptedBlock(ref, corrupt_fill_, payload);
  }
  Result<storage::BlockHeader> Read(const storage::BlockRef& ref, std::span<uint8_t> out) override {
    std::vector<uint8_t> payload;
    storage::BlockHeader header = ScriptedBlock(ref, corrupt_fill_, payload);
    std::copy(payload.begin(), payload.end(), out.begin());
    return header;
  }

 private:
  const int corrupt_fill_;
};

// How the scripted peer serves its blocks.
enum class PeerMode { kInline, kTickets, kSessions };

// Holds every key asked for (ScriptedBlock); with `stream`, openGet answers on it, and
// with `sessions` openGetSession too (whose keyed gets read the stream's tiers).
class ScriptedStore final : public schema::BlockStore::Server {
 public:
  ScriptedStore(int corrupt_fill, store::DataStreamServer* stream, bool sessions,
                std::atomic<int>& open_gets)
      : corrupt_fill_(corrupt_fill),
        stream_(stream),
        sessions_(sessions),
        open_gets_(open_gets),
        source_(corrupt_fill) {}

 protected:
  kj::Promise<void> get(GetContext call) override {
    const auto p = call.getParams();
    auto blocks = call.getResults().initBlocks(p.getKeys().size());
    auto states = call.getResults().initStates(p.getKeys().size());
    for (unsigned i = 0; i < p.getKeys().size(); ++i) {
      std::vector<uint8_t> payload;
      const storage::BlockHeader header =
          ScriptedBlock({rpc::ToKey(p.getKeys()[i]), p.getFormatTag().cStr(), p.getSaltScope()},
                        corrupt_fill_, payload);
      store::ToWire(header, blocks[i].initHeader());
      blocks[i].setData(kj::arrayPtr(payload.data(), payload.size()));
      states.set(i, schema::BlockState::PRESENT);
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> openGet(OpenGetContext call) override {
    if (stream_ == nullptr) return schema::BlockStore::Server::openGet(call);  // UNIMPLEMENTED
    ++open_gets_;
    const auto p = call.getParams();
    const std::vector<BlockKey> keys = rpc::ToKeys(p.getKeys());
    const auto opened =
        stream_->OpenGet(keys, p.getFormatTag().cStr(), p.getSaltScope(), &source_).value();
    auto results = call.getResults();
    store::ToWire(opened.ticket, results.initTicket());
    auto headers = results.initHeaders(static_cast<unsigned>(keys.size()));
    auto states = results.initStates(static_cast<unsigned>(keys.size()));
    for (unsigned i = 0; i < keys.size(); ++i) {
      store::ToWire(*opened.headers[i], headers[i]);
      states.set(i, schema::BlockState::PRESENT);
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> openGetSession(OpenGetSessionContext call) override {
    if (!sessions_) return schema::BlockStore::Server::openGetSession(call);  // UNIMPLEMENTED
    const auto p = call.getParams();
    const auto session =
        stream_
            ->OpenSession({.format_tag = p.getFormatTag().cStr(), .salt_scope = p.getSaltScope()})
            .value();
    store::ToWire(session, call.getResults().initTicket());
    return kj::READY_NOW;
  }

 private:
  const int corrupt_fill_;
  store::DataStreamServer* const stream_;
  const bool sessions_;
  std::atomic<int>& open_gets_;
  ScriptedSource source_;
};

// The parameter: how the peer serves its blocks.
class PeerFetcherTest : public ::testing::TestWithParam<PeerMode> {
 protected:
  void SetUp() override {
    storage::TieredStoreOptions
        tiers;  // empty but for kSessions: the scripted source serves the rest
    tiers.host.emplace();
    tiers.host->capacity_bytes = 1 << 20;
    tiers.host->try_huge_pages = false;
    tiers_ = storage::TieredStore::Create(std::move(tiers)).value();
    if (GetParam() != PeerMode::kInline) {
      stream_ =
          store::DataStreamServer::Create({.store = tiers_.get(), .port = stream_port_.port()})
              .value();
    }
  }

  // A peer BlockStore whose block `corrupt_fill` fails its checksum (-1: none does).
  testing::StoreFactory Peer(int corrupt_fill) {
    return [this, corrupt_fill](const auth::Tenant&) -> kj::Own<capnp::Capability::Server> {
      return kj::heap<ScriptedStore>(corrupt_fill, stream_.get(), GetParam() == PeerMode::kSessions,
                                     open_gets_);
    };
  }

  // kSessions: the scripted blocks 0-3 in the peer's tiers, where keyed gets read them; the
  // corrupt one stored unchecked, as bytes that went bad in memory after their checksum.
  void StoreScriptedBlocks(int corrupt_fill) {
    for (uint64_t lo = 0; lo < 4; ++lo) {
      std::vector<uint8_t> payload;
      const storage::BlockHeader header =
          ScriptedBlock({BlockKey{1, lo}, kFormat, kScope}, corrupt_fill, payload);
      const storage::PutItem item{header, payload, /*checksum_checked=*/true};
      ASSERT_TRUE(tiers_->PutBatch(std::span(&item, 1))[0].ok());
    }
  }

  // `listen`: where the coordinator (and the scripted peer) answer.
  void Start(int corrupt_fill, const std::string& listen = "127.0.0.1:0") {
    if (GetParam() == PeerMode::kSessions) StoreScriptedBlocks(corrupt_fill);
    // "peer/store" resolves to the BlockStore scripted here.
    node_ =
        testing::StartCoordinatorWithStoreNode(registry_, Peer(corrupt_fill), "peer/store", listen);
    nodes_ = NodeConnections::Create(
                 {.coordinator_address = node_->endpoints()[0], .token = "auth is off"})
                 .value();
    fetcher_ = PeerFetcher::Create({.connections = nodes_.get(),
                                    .self_node_ids = {"me/worker"},
                                    .stream_min_block_bytes = 0})  // these 64-byte blocks too
                   .value();
  }

  // Blocks 0 to `blocks` - 1, into the fetch's buffer, or landed in `land_in` with `keep`.
  FetchedBlocks Fetch(std::vector<std::string> nodes, uint32_t blocks,
                      std::vector<std::span<uint8_t>> land_in = {},
                      std::shared_ptr<void> keep = {}) {
    return Fetch(
        {.node_ids = std::move(nodes), .land_in = std::move(land_in), .keep = std::move(keep)},
        blocks);
  }
  // `request` (its nodes and landing) for blocks 0 to `blocks` - 1.
  FetchedBlocks Fetch(PeerFetchRequest request, uint32_t blocks) {
    request.format_tag = kFormat;
    request.salt_scope = kScope;
    request.block_bytes = kBlockBytes;
    for (uint32_t i = 0; i < blocks; ++i) request.keys.push_back(BlockKey{1, i});
    auto io = kj::setupAsyncIo();
    return fetcher_->Fetch(std::move(request)).wait(io.waitScope);
  }
  // `blocks` places of one block each in `memory`.
  static std::vector<std::span<uint8_t>> Places(std::vector<uint8_t>& memory, uint32_t blocks) {
    std::vector<std::span<uint8_t>> places;
    for (uint32_t i = 0; i < blocks; ++i)
      places.emplace_back(memory.data() + i * kBlockBytes, kBlockBytes);
    return places;
  }

  // Blocks that came on the stream when the peer runs one, else none.
  uint32_t Streamed(const FetchedBlocks& fetched) const {
    return GetParam() != PeerMode::kInline ? fetched.keys.size() : 0;
  }

  std::unique_ptr<storage::TieredStore> tiers_;
  // The data stream's port, held for a test that stops the stream and starts one there again.
  const kvtier::testing::ReservedPort stream_port_;
  std::unique_ptr<store::DataStreamServer> stream_;
  std::atomic<int> open_gets_{0};  // the peer's openGet calls
  MetricsRegistry registry_;
  std::unique_ptr<coordinator::CoordinatorNode> node_;
  std::unique_ptr<NodeConnections> nodes_;
  std::unique_ptr<PeerFetcher> fetcher_;
};

TEST_P(PeerFetcherTest, TakesEveryBlockAPeerHoldsInOrder) {
  Start(/*corrupt_fill=*/-1);
  const FetchedBlocks fetched = Fetch({"me/worker", "peer/store"}, 3);
  ASSERT_EQ(fetched.keys.size(), 3u) << "this node's own id is skipped, the peer serves all three";
  ASSERT_EQ(fetched.bytes.size(), 3 * kBlockBytes);
  EXPECT_EQ(fetched.bytes[0], 0);
  EXPECT_EQ(fetched.bytes[2 * kBlockBytes], 2);
  EXPECT_EQ(fetched.rejected, 0u);
  EXPECT_EQ(fetched.streamed, Streamed(fetched));
  EXPECT_EQ(open_gets_.load() > 0, GetParam() == PeerMode::kTickets)
      << "a store's blocks come by keyed gets";
}

TEST_P(PeerFetcherTest, ABlockThatFailsItsChecksumEndsTheRun) {
  Start(/*corrupt_fill=*/1);
  const FetchedBlocks fetched = Fetch({"peer/store"}, 3);
  ASSERT_EQ(fetched.keys.size(), 1u) << "block 0 taken; block 1 corrupt; block 2 not after it";
  EXPECT_EQ(fetched.bytes.size(), kBlockBytes);
  EXPECT_EQ(fetched.rejected, 1u);
  EXPECT_EQ(fetched.streamed, Streamed(fetched));
}

// The caller's places (a worker's pool blocks) take blocks 0 and 2; block 1 fails its
// checksum, so the run taken is block 0 alone, block 2 not asked for after it; the
// fetch's buffer stays empty, and the fetch lets go of the caller's keep once done.
TEST_P(PeerFetcherTest, BlocksLandInTheCallersPlacesAndTheFetchLetsGoOfItsKeep) {
  Start(/*corrupt_fill=*/1);
  std::vector<uint8_t> memory(3 * kBlockBytes, 0xee);
  auto keep = std::make_shared<int>(0);
  const std::weak_ptr<int> kept = keep;
  const FetchedBlocks fetched = Fetch({"peer/store"}, 3, Places(memory, 3), std::move(keep));
  ASSERT_EQ(fetched.keys.size(), 1u);
  EXPECT_EQ(fetched.rejected, 1u);
  EXPECT_TRUE(fetched.bytes.empty()) << "landed, not buffered";
  EXPECT_EQ(memory[0], 0);
  EXPECT_EQ(memory[kBlockBytes - 1], 0) << "block 0 whole";
  EXPECT_TRUE(kvtier::testing::WaitUntil([&] { return kept.expired(); }));
}

// Every block of the run lands whole in its own place, by whichever path it came.
TEST_P(PeerFetcherTest, EveryBlockOfTheRunLandsInItsPlace) {
  Start(/*corrupt_fill=*/-1);
  std::vector<uint8_t> memory(3 * kBlockBytes, 0xee);
  const FetchedBlocks whole = Fetch({"peer/store"}, 3, Places(memory, 3));
  ASSERT_EQ(whole.keys.size(), 3u);
  EXPECT_EQ(memory[kBlockBytes], 1);
  EXPECT_EQ(memory[2 * kBlockBytes], 2);
  EXPECT_EQ(memory[3 * kBlockBytes - 1], 2);
  EXPECT_EQ(whole.streamed, Streamed(whole));
}

// The request lands its run itself (a device pool's blocks): `land` is called once, on
// the fetch's thread, with the run (block 0; block 1 fails its checksum) in the buffer,
// before the fetch is answered and its keep let go. A landing that fails leaves the
// blocks in the buffer, not landed.
TEST_P(PeerFetcherTest, ARequestsLandLandsTheRunOnTheFetchsThreadBeforeTheAnswer) {
  Start(/*corrupt_fill=*/1);
  for (const Status& answer : {Status::Ok(), UnavailableError("no copier")}) {
    auto keep = std::make_shared<int>(0);
    std::vector<std::vector<uint8_t>> landed;
    std::thread::id landed_on;
    bool kept_while_landing = false;
    const FetchedBlocks fetched =
        Fetch({.node_ids = {"peer/store"},
               .land =
                   [&, kept = std::weak_ptr<int>(keep)](const FetchedBlocks& run) {
                     landed_on = std::this_thread::get_id();
                     kept_while_landing = !kept.expired();
                     for (size_t i = 0; i < run.keys.size(); ++i) {
                       landed.emplace_back(run.bytes.begin() + i * kBlockBytes,
                                           run.bytes.begin() + (i + 1) * kBlockBytes);
                     }
                     return answer;
                   },
               .keep = std::move(keep)},
              3);
    ASSERT_EQ(fetched.keys.size(), 1u) << answer;
    EXPECT_EQ(fetched.landed, answer.ok()) << answer;
    EXPECT_EQ(fetched.bytes.size(), kBlockBytes) << "the run stays in the buffer";
    ASSERT_EQ(landed.size(), 1u) << answer;
    EXPECT_EQ(landed[0], std::vector<uint8_t>(kBlockBytes, 0)) << "block 0's bytes";
    EXPECT_NE(landed_on, std::this_thread::get_id()) << "on the fetch's thread";
    EXPECT_TRUE(kept_while_landing);
  }
}

// Landing places that do not fit the request (two for three blocks, or of another size):
// nothing is fetched, nothing written.
TEST_P(PeerFetcherTest, LandingPlacesThatDoNotFitFetchNothing) {
  Start(/*corrupt_fill=*/-1);
  std::vector<uint8_t> memory(3 * kBlockBytes, 0xee);
  EXPECT_TRUE(Fetch({"peer/store"}, 3, Places(memory, 2)).keys.empty());
  std::vector<std::span<uint8_t>> short_places = Places(memory, 3);
  short_places[1] = short_places[1].first(kBlockBytes - 1);
  EXPECT_TRUE(Fetch({"peer/store"}, 3, short_places).keys.empty());
  EXPECT_TRUE(std::ranges::all_of(memory, [](uint8_t b) { return b == 0xee; }));
}

TEST_P(PeerFetcherTest, APeerThatRestartedIsReachedAgainOnTheNextFetch) {
  const kvtier::testing::ReservedPort peer_port;
  Start(/*corrupt_fill=*/-1, peer_port.address());
  ASSERT_EQ(Fetch({"peer/store"}, 2).keys.size(), 2u);
  // The peer (and the coordinator with it) restarts at the same address: the kept
  // connection is closed, and the next fetch connects afresh instead of failing on it.
  const std::string address = node_->endpoints()[0];
  std::shared_ptr<rpc::RpcClient> kept = nodes_->Connect(address).value();
  node_.reset();
  ASSERT_TRUE(kvtier::testing::WaitUntil([&] { return !kept->connected(); }))
      << "the kept connection saw the peer go";
  MetricsRegistry second;
  node_ = testing::StartCoordinatorWithStoreNode(second, Peer(-1), "peer/store", address);
  EXPECT_EQ(Fetch({"peer/store"}, 2).keys.size(), 2u);
  node_.reset();  // before its registry goes
}

TEST_P(PeerFetcherTest, AKeptStreamConnectionToARestartedPeerIsMadeAgain) {
  if (GetParam() == PeerMode::kInline) GTEST_SKIP() << "the peer runs no data stream";
  Start(/*corrupt_fill=*/-1);
  ASSERT_EQ(Fetch({"peer/store"}, 2).streamed, 2u);  // leaves one stream connection kept
  // The peer's data stream restarts on the same port: the kept connection is now closed.
  const std::string address = stream_->address();
  stream_.reset();
  stream_ =
      store::DataStreamServer::Create({.store = tiers_.get(), .port = stream_port_.port()}).value();
  ASSERT_EQ(stream_->address(), address);
  const FetchedBlocks fetched = Fetch({"peer/store"}, 2);
  EXPECT_EQ(fetched.keys.size(), 2u);
  EXPECT_EQ(fetched.streamed, 2u) << "on a fresh connection, not inline and not lost";
  if (GetParam() == PeerMode::kSessions) {
    EXPECT_EQ(open_gets_.load(), 0) << "the lost session was opened again, no openGet instead";
  }
}

TEST_P(PeerFetcherTest, BlocksBelowTheStreamThresholdComeInline) {
  Start(/*corrupt_fill=*/-1);
  fetcher_ =
      PeerFetcher::Create({.connections = nodes_.get(), .stream_min_block_bytes = kBlockBytes + 1})
          .value();
  const FetchedBlocks fetched = Fetch({"peer/store"}, 2);
  EXPECT_EQ(fetched.keys.size(), 2u);
  EXPECT_EQ(fetched.streamed, 0u) << "64-byte blocks under a 65-byte threshold";
}

TEST_P(PeerFetcherTest, NodesThatAreNotLiveHoldNothing) {
  Start(/*corrupt_fill=*/-1);
  const FetchedBlocks fetched = Fetch({"gone/worker", "me/worker"}, 2);
  EXPECT_TRUE(fetched.keys.empty());
  EXPECT_TRUE(fetched.bytes.empty());
}

INSTANTIATE_TEST_SUITE_P(InlineTicketsAndSessions, PeerFetcherTest,
                         ::testing::Values(PeerMode::kInline, PeerMode::kTickets,
                                           PeerMode::kSessions),
                         [](const ::testing::TestParamInfo<PeerMode>& info) {
                           return info.param == PeerMode::kInline    ? "Inline"
                                  : info.param == PeerMode::kTickets ? "Tickets"
                                                                     : "Sessions";
                         });

}  // namespace
}  // namespace kvtier::worker
