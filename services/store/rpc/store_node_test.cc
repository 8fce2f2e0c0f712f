// A storage node of its own against a coordinator over loopback: it registers, its blocks
// show in lookups at the store's tiers, a drain takes them out at once, and after a
// restart its disk blocks come back through the snapshot.
#include "services/store/rpc/store_node.h"

#include <capnp/ez-rpc.h>
#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "services/coordinator/rpc/coordinator_node.h"
#include "services/rpc/schema/kvtier.capnp.h"
#include "services/store/rpc/block_header_wire.h"
#include "services/store/stream/data_stream_client.h"
#include "storage/testing/blocks.h"
#include "tests/testing/test_util.h"

namespace kvtier::store {
namespace {

namespace schema = kvtier::rpc::schema;
using namespace std::chrono_literals;
using storage::testing::MakeBlock;
using storage::testing::TestBlock;

// One authenticated session with a node (auth is off: any token).
class Session {
 public:
  explicit Session(const std::string& address) : client_(address) {
    auto auth = client_.getMain<schema::Bootstrap>().authenticateRequest();
    auth.setToken("any");
    session_ = auth.send().wait(client_.getWaitScope()).getSession();
  }
  kj::WaitScope& wait() { return client_.getWaitScope(); }
  schema::Session::Client& session() { return *session_; }

 private:
  capnp::EzRpcClient client_;
  std::optional<schema::Session::Client> session_;
};

class StoreNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator::CoordinatorNodeOptions options;
    options.rpc.listen = {coordinator_port_.address()};
    options.registry = &coordinator_registry_;
    options.tick_interval = 20ms;
    coordinator_ = coordinator::CoordinatorNode::Create(std::move(options)).value();
  }

  // `admission`: store.disk_admission, where not the default.
  std::unique_ptr<StoreNode> StartStore(MetricsRegistry& registry, uint64_t disk_bytes = 1 << 20,
                                        std::string admission = "") {
    StoreNodeOptions options;
    options.config.data_dir = dir_.path();
    // A one-block host tier over the disk: the second block put moves the first to disk.
    options.config.store.host_cache_bytes = 64 << 10;
    options.config.store.disk_bytes = disk_bytes;
    if (!admission.empty()) options.config.store.disk_admission = admission;
    options.config.store.listen = "127.0.0.1:0";
    options.config.node.coordinator = coordinator_->endpoints()[0];
    options.registry = &registry;
    options.node_id = "store-0";
    options.tick = 10ms;
    auto node = StoreNode::Create(std::move(options));
    EXPECT_TRUE(node.ok()) << node.status();
    return node.ok() ? std::move(node).value() : nullptr;
  }

  // Puts blocks through the store's BlockStore capability, as a worker would.
  void Put(StoreNode& node, const std::vector<TestBlock>& blocks) {
    Session s(node.endpoints()[0]);
    auto store = s.session().storeRequest().send().wait(s.wait()).getStore();
    auto request = store.putRequest();
    auto list = request.initBlocks(static_cast<unsigned>(blocks.size()));
    for (unsigned i = 0; i < blocks.size(); ++i) {
      storage::BlockHeader header = blocks[i].header;
      header.first_in_chain = true;  // each block a one-block chain, as the lookups ask
      ToWire(header, list[i].initHeader());
      list[i].setData(kj::arrayPtr(blocks[i].payload.data(), blocks[i].payload.size()));
    }
    EXPECT_EQ(request.send().wait(s.wait()).getStored(), blocks.size());
  }

  // "present"/"missing" of each block `id` (MakeBlock's keys), through a BlockStore
  // contains (a get would promote disk hits and so move blocks about).
  std::string States(StoreNode& node, const std::vector<uint64_t>& ids) {
    Session s(node.endpoints()[0]);
    auto store = s.session().storeRequest().send().wait(s.wait()).getStore();
    auto request = store.containsRequest();
    auto keys = request.initKeys(static_cast<unsigned>(ids.size()));
    for (unsigned i = 0; i < ids.size(); ++i) keys[i].setHi(0x1234), keys[i].setLo(ids[i]);
    request.setFormatTag(storage::testing::kFormat);
    auto response = request.send().wait(s.wait());
    std::string states;
    for (bool present : response.getPresent())
      states += std::string(states.empty() ? "" : " ") + (present ? "present" : "missing");
    return states;
  }

  // "tier tier ..." of where the coordinator places each of `ids` (as one-block chains),
  // waiting up to 5 s for it to equal `want`.
  std::string WaitForTiers(const std::vector<uint64_t>& ids, const std::string& want) {
    Session s(coordinator_->endpoints()[0]);
    auto coordinator = s.session().coordinatorRequest().send().wait(s.wait()).getCoordinator();
    std::string seen;
    testing::WaitUntil([&] {
      seen.clear();
      for (uint64_t id : ids) {
        auto request = coordinator.lookupRequest();
        auto key = request.initRequest().initKeys(1)[0];
        key.setHi(0x1234);
        key.setLo(id);
        auto response = request.send().wait(s.wait());
        auto blocks = response.getResult().getBlocks();
        std::string where = "none";
        if (blocks.size() == 1 && blocks[0].getLocations().size() == 1) {
          auto location = blocks[0].getLocations()[0];
          where = std::string(location.getNodeId().cStr()) + ":" +
                  (location.getTier() == schema::Tier::HOST ? "host" : "disk");
        }
        seen += (seen.empty() ? "" : " ") + where;
      }
      return seen == want;
    });
    return seen;
  }

  testing::TempDir dir_;
  // The coordinator's port, held across the tests that stop it and start one there again.
  const testing::ReservedPort coordinator_port_;
  MetricsRegistry coordinator_registry_;
  std::unique_ptr<coordinator::CoordinatorNode> coordinator_;
};

TEST_F(StoreNodeTest, ServesBlocksOnItsDataStream) {
  MetricsRegistry registry;
  auto node = StartStore(registry);
  ASSERT_NE(node, nullptr);
  const uint64_t scope = SaltScope("");
  // Block 1 goes in on the data stream (openPut), then comes back out on it (openGet).
  const TestBlock block = MakeBlock(1, 64 << 10, 50, scope);
  Session s(node->endpoints()[0]);
  auto store = s.session().storeRequest().send().wait(s.wait()).getStore();
  auto open_put = store.openPutRequest();
  ToWire(block.header, open_put.initHeaders(1)[0]);
  const TransferTicket put = FromWire(open_put.send().wait(s.wait()).getTicket());
  EXPECT_TRUE(put.data_address.starts_with("127.0.0.1:")) << put.data_address;
  auto stream = DataStreamClient::Connect({.address = put.data_address}).value();
  const std::vector<std::span<const uint8_t>> payloads{block.payload};
  ASSERT_EQ(stream->Put(put, payloads).value(), 1u);

  auto open_get = store.openGetRequest();
  open_get.initKeys(1)[0].setLo(1);
  open_get.getKeys()[0].setHi(0x1234);
  open_get.setFormatTag(storage::testing::kFormat);
  auto opened = open_get.send().wait(s.wait());
  ASSERT_EQ(opened.getStates()[0], schema::BlockState::PRESENT);
  std::vector<uint8_t> bytes(opened.getHeaders()[0].getPayloadBytes());
  const std::vector<std::span<uint8_t>> outs{bytes};
  const auto states = stream->Get(FromWire(opened.getTicket()), outs);
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ(bytes, block.payload);
  // The node's metrics count both transfers (once each reply is written: bounded wait).
  const std::string want = "kvtier_stream_bytes_total{direction=\"sent\"} 65536";
  EXPECT_TRUE(testing::WaitUntil([&] {
    return registry.Exposition().find(want) != std::string::npos;
  })) << registry.Exposition();
  EXPECT_TRUE(node->Drain().ok());
}

TEST_F(StoreNodeTest, AFullDiskAdmitsOnlyBlocksThisStoreWasAskedForTwice) {
  MetricsRegistry registry;
  // Host: 1 block, disk: 2, admitting to the full disk blocks asked for twice (min-count 2).
  auto node = StartStore(registry, /*disk_bytes=*/2 * (64 << 10), "min-count");
  ASSERT_NE(node, nullptr);
  const uint64_t scope = SaltScope("");
  auto block = [&](uint64_t id) { return MakeBlock(id, 64 << 10, 50, scope); };
  // Blocks 1, 2, 3 put once each: 3 in the host tier, 1 and 2 demoted to the disk while it had
  // room.
  for (uint64_t id : {1, 2, 3}) Put(*node, {block(id)});
  // Block 3 is asked for once more (a contains): two requests.
  EXPECT_EQ(States(*node, {3}), "present");
  // Block 4 pushes 3 down to the full disk: admitted (asked twice), displacing block 1.
  Put(*node, {block(4)});
  // Block 5 pushes 4 down: asked once, refused; it is gone.
  Put(*node, {block(5)});
  EXPECT_EQ(States(*node, {1, 2, 3, 4, 5}), "missing present present missing present");
  EXPECT_TRUE(node->Drain().ok());
}

TEST_F(StoreNodeTest, UnderTinyLfuABlockAskedForLessOftenThanItsVictimStaysOut) {
  MetricsRegistry registry;
  auto node = StartStore(registry, /*disk_bytes=*/2 * (64 << 10), "tinylfu");
  ASSERT_NE(node, nullptr);
  const uint64_t scope = SaltScope("");
  auto block = [&](uint64_t id) { return MakeBlock(id, 64 << 10, 50, scope); };
  // 1 and 2 on the disk, 3 in the host tier; then 1 is asked for 4 times in all, 3 for 3.
  for (uint64_t id : {1, 2, 3}) Put(*node, {block(id)});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(States(*node, {1}), "present");
  for (int i = 0; i < 2; ++i) EXPECT_EQ(States(*node, {3}), "present");
  // Block 4 pushes 3 down to the full disk, where it would displace 1, the disk's oldest,
  // asked for more often: 3 is dropped, unwritten (a threshold of 2 would have let it in).
  Put(*node, {block(4)});
  EXPECT_EQ(States(*node, {1, 2, 3, 4}), "present present missing present");
  // 1 has been asked for 5 times; 4, asked for 6 times, then displaces it.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(States(*node, {4}), "present");
  Put(*node, {block(5)});
  EXPECT_EQ(States(*node, {1, 2, 4, 5}), "missing present present present");
  EXPECT_TRUE(node->Drain().ok());
}

TEST_F(StoreNodeTest, AFullDiskAdmitsEveryBlockByDefault) {
  MetricsRegistry registry;
  auto node = StartStore(registry, /*disk_bytes=*/2 * (64 << 10));  // host: 1 block, disk: 2
  ASSERT_NE(node, nullptr);
  const uint64_t scope = SaltScope("");
  auto block = [&](uint64_t id) { return MakeBlock(id, 64 << 10, 50, scope); };
  // Blocks 1, 2, 3 put once each: 3 in the host tier, 1 and 2 on the disk.
  for (uint64_t id : {1, 2, 3}) Put(*node, {block(id)});
  // Blocks 4 and 5, asked for once each, push 3 and then 4 down to the full disk: both
  // admitted, displacing 1 and 2.
  for (uint64_t id : {4, 5}) Put(*node, {block(id)});
  EXPECT_EQ(States(*node, {1, 2, 3, 4, 5}), "missing missing present present present");
  EXPECT_TRUE(node->Drain().ok());
}

TEST_F(StoreNodeTest, RegistersPublishesDrainsAndComesBackFromDisk) {
  // The salt scope of the tenant that auth-off sessions get (empty salt).
  const uint64_t scope = SaltScope("");
  const TestBlock a = MakeBlock(1, 64 << 10, 50, scope), b = MakeBlock(2, 64 << 10, 50, scope);
  {
    MetricsRegistry registry;
    auto node = StartStore(registry);
    ASSERT_NE(node, nullptr);
    ASSERT_TRUE(testing::WaitUntil([&] { return node->registered(); }));
    // Block 1 into the host tier; block 2 pushes it down to disk.
    Put(*node, {a});
    EXPECT_EQ(WaitForTiers({1}, "store-0:host"), "store-0:host");
    Put(*node, {b});
    EXPECT_EQ(WaitForTiers({1, 2}, "store-0:disk store-0:host"), "store-0:disk store-0:host");
    // Drain: the node leaves, and its blocks leave lookups at once (no lease to wait out).
    ASSERT_TRUE(node->Drain().ok());
    EXPECT_FALSE(node->registered());
    EXPECT_EQ(WaitForTiers({1, 2}, "none none"), "none none");
  }
  // Restarted on the same data directory: a new incarnation, whose snapshot brings back
  // what the disk kept (block 1; block 2 was only in memory).
  MetricsRegistry registry;
  auto restarted = StartStore(registry);
  ASSERT_NE(restarted, nullptr);
  EXPECT_EQ(WaitForTiers({1, 2}, "store-0:disk none"), "store-0:disk none");
}

TEST_F(StoreNodeTest, ARestartedCoordinatorIsRebuiltFromTheStoresSnapshot) {
  const uint64_t scope = SaltScope("");
  MetricsRegistry registry;
  auto node = StartStore(registry);
  ASSERT_NE(node, nullptr);
  Put(*node, {MakeBlock(5, 64 << 10, 50, scope)});
  ASSERT_EQ(WaitForTiers({5}, "store-0:host"), "store-0:host");
  // The coordinator restarts on the same address with an empty index: the store notices
  // the lost connection, connects and registers again, and its snapshot refills the index.
  coordinator_.reset();
  coordinator::CoordinatorNodeOptions options;
  options.rpc.listen = {coordinator_port_.address()};
  MetricsRegistry second_registry;
  options.registry = &second_registry;
  coordinator_ = coordinator::CoordinatorNode::Create(std::move(options)).value();
  EXPECT_EQ(WaitForTiers({5}, "store-0:host"), "store-0:host");
  coordinator_.reset();  // before its registry goes
}

TEST_F(StoreNodeTest, ServesWhileTheCoordinatorIsAwayAndRegistersWhenItComes) {
  // A coordinator address where nothing listens yet: the port of one that was just stopped,
  // still held for this test.
  const std::string address = coordinator_port_.address();
  coordinator_.reset();
  MetricsRegistry registry;
  StoreNodeOptions options;
  options.config.data_dir = dir_.path();
  options.config.store.listen = "127.0.0.1:0";
  options.config.node.coordinator = address;
  options.registry = &registry;
  options.node_id = "store-1";
  options.tick = 10ms;
  auto node = StoreNode::Create(std::move(options));
  ASSERT_TRUE(node.ok()) << node.status();
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE((*node)->registered());
  // It serves blocks meanwhile.
  Session s((*node)->endpoints()[0]);
  auto version = s.session().versionRequest().send().wait(s.wait());
  EXPECT_EQ(std::string(version.getServer().getRoles()[0].cStr()), "store");
  // The coordinator comes up at that address: the store registers by itself.
  coordinator::CoordinatorNodeOptions coordinator;
  coordinator.rpc.listen = {address};
  MetricsRegistry second_registry;
  coordinator.registry = &second_registry;
  auto started = coordinator::CoordinatorNode::Create(std::move(coordinator));
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_TRUE(testing::WaitUntil([&] { return (*node)->registered(); }));
  EXPECT_TRUE((*node)->Drain().ok());
}

}  // namespace
}  // namespace kvtier::store
