// PeerFetcher against a real coordinator and a peer whose BlockStore is scripted here: it
// resolves the peer at the coordinator, takes the leading run of good blocks, refuses a
// block whose payload does not match its checksum (and what follows it), and treats an
// unknown node as holding nothing.
#include "services/worker/rpc/peer_fetcher.h"

#include <gtest/gtest.h>
#include <kj/async-io.h>

#include <thread>

#include "services/rpc/schema/kvtier.capnp.h"
#include "services/rpc/schema_convert.h"
#include "services/worker/rpc/node_connections.h"
#include "services/worker/rpc/peer_node_testing.h"
#include "storage/block_header.h"

namespace kvtier::worker {
namespace {

namespace schema = kvtier::rpc::schema;
constexpr uint64_t kBlockBytes = 64;
constexpr uint64_t kScope = 77;
const char* const kFormat = "L1/H1/D8/T4/fp16/W0/S0|f0000000000000000";

// Holds every key asked for, block i filled with byte i; the block whose fill is
// `corrupt_fill` is sent with its payload changed after its checksum was taken.
class ScriptedStore final : public schema::BlockStore::Server {
 public:
  explicit ScriptedStore(int corrupt_fill) : corrupt_fill_(corrupt_fill) {}

 protected:
  kj::Promise<void> get(GetContext call) override {
    const auto p = call.getParams();
    auto blocks = call.getResults().initBlocks(p.getKeys().size());
    auto states = call.getResults().initStates(p.getKeys().size());
    for (unsigned i = 0; i < p.getKeys().size(); ++i) {
      const uint8_t fill = static_cast<uint8_t>(rpc::ToKey(p.getKeys()[i]).lo);
      std::vector<uint8_t> payload(kBlockBytes, fill);
      auto header = blocks[i].initHeader();
      header.setKey(p.getKeys()[i]);
      header.setSaltScope(p.getSaltScope());
      header.setFormatTag(p.getFormatTag());
      header.setPayloadBytes(kBlockBytes);
      header.setChecksum(storage::PayloadChecksum(payload));
      if (fill == corrupt_fill_) payload[5] ^= 1;
      blocks[i].setData(kj::arrayPtr(payload.data(), payload.size()));
      states.set(i, schema::BlockState::PRESENT);
    }
    return kj::READY_NOW;
  }

 private:
  const int corrupt_fill_;
};

class PeerFetcherTest : public ::testing::Test {
 protected:
  // `listen`: where the coordinator (and the scripted peer) answer.
  void Start(int corrupt_fill, const std::string& listen = "127.0.0.1:0") {
    // "peer/store" resolves to the BlockStore scripted here.
    node_ = testing::StartCoordinatorWithStoreNode(
        registry_, [corrupt_fill](const auth::Tenant&) -> capnp::Capability::Client {
          return kj::heap<ScriptedStore>(corrupt_fill);
        },
        "peer/store", listen);
    nodes_ = NodeConnections::Create({.coordinator_address = node_->endpoints()[0], .token = "auth is off"}).value();
    fetcher_ = PeerFetcher::Create({.connections = nodes_.get(), .self_node_ids = {"me/worker"}}).value();
  }

  FetchedBlocks Fetch(std::vector<std::string> nodes, uint32_t blocks) {
    PeerFetchRequest request{std::move(nodes), {}, kFormat, kScope, kBlockBytes};
    for (uint32_t i = 0; i < blocks; ++i) request.keys.push_back(BlockKey{1, i});
    auto io = kj::setupAsyncIo();
    return fetcher_->Fetch(std::move(request)).wait(io.waitScope);
  }

  MetricsRegistry registry_;
  std::unique_ptr<coordinator::CoordinatorNode> node_;
  std::unique_ptr<NodeConnections> nodes_;
  std::unique_ptr<PeerFetcher> fetcher_;
};

TEST_F(PeerFetcherTest, TakesEveryBlockAPeerHoldsInOrder) {
  Start(/*corrupt_fill=*/-1);
  const FetchedBlocks fetched = Fetch({"me/worker", "peer/store"}, 3);
  ASSERT_EQ(fetched.keys.size(), 3u) << "this node's own id is skipped, the peer serves all three";
  ASSERT_EQ(fetched.bytes.size(), 3 * kBlockBytes);
  EXPECT_EQ(fetched.bytes[0], 0);
  EXPECT_EQ(fetched.bytes[2 * kBlockBytes], 2);
  EXPECT_EQ(fetched.rejected, 0u);
}

TEST_F(PeerFetcherTest, ABlockThatFailsItsChecksumEndsTheRun) {
  Start(/*corrupt_fill=*/1);
  const FetchedBlocks fetched = Fetch({"peer/store"}, 3);
  ASSERT_EQ(fetched.keys.size(), 1u) << "block 0 taken; block 1 corrupt; block 2 not after it";
  EXPECT_EQ(fetched.bytes.size(), kBlockBytes);
  EXPECT_EQ(fetched.rejected, 1u);
}

TEST_F(PeerFetcherTest, APeerThatRestartedIsReachedAgainOnTheNextFetch) {
  Start(/*corrupt_fill=*/-1);
  ASSERT_EQ(Fetch({"peer/store"}, 2).keys.size(), 2u);
  // The peer (and the coordinator with it) restarts at the same address: the kept
  // connection is closed, and the next fetch connects afresh instead of failing on it.
  const std::string address = node_->endpoints()[0];
  std::shared_ptr<rpc::RpcClient> kept = nodes_->Connect(address).value();
  node_.reset();
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       kept->connected() && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_FALSE(kept->connected()) << "the kept connection saw the peer go";
  MetricsRegistry second;
  node_ = testing::StartCoordinatorWithStoreNode(
      second, [](const auth::Tenant&) -> capnp::Capability::Client { return kj::heap<ScriptedStore>(-1); },
      "peer/store", address);
  EXPECT_EQ(Fetch({"peer/store"}, 2).keys.size(), 2u);
  node_.reset();  // before its registry goes
}

TEST_F(PeerFetcherTest, NodesThatAreNotLiveHoldNothing) {
  Start(/*corrupt_fill=*/-1);
  const FetchedBlocks fetched = Fetch({"gone/worker", "me/worker"}, 2);
  EXPECT_TRUE(fetched.keys.empty());
  EXPECT_TRUE(fetched.bytes.empty());
}

}  // namespace
}  // namespace kvtier::worker
