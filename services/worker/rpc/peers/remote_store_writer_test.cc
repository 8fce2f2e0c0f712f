// RemoteStoreWriter against a real BlockStore (host tier) reached through the coordinator:
// committed blocks land under their own salt scopes with their bytes and checksums; a
// full queue skips blocks rather than waiting; a store that is not live fails batches
// without holding up the writer.
#include "services/worker/rpc/peers/remote_store_writer.h"

#include <gtest/gtest.h>

#include <deque>
#include <set>

#include "services/rpc/schema/store.capnp.h"
#include "services/store/rpc/store_service.h"
#include "services/worker/rpc/peers/node_connections.h"
#include "services/worker/rpc/peers/peer_node_testing.h"
#include "storage/tiered_store.h"

namespace kvtier::worker {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kBlockBytes = 256;
const std::string kFormat = "L1/H1/D8/T4/fp16/W0/S0|f0000000000000000";

storage::BlockHeader Header(uint64_t key, uint64_t scope) {
  storage::BlockHeader header;
  header.key = BlockKey{7, key};
  header.parent = BlockKey{7, key - 1};
  header.format_tag = kFormat;
  header.salt_scope = scope;
  header.payload_bytes = kBlockBytes;
  header.priority = 60;
  return header;
}

// Writes block `key` filled with byte `fill`.
auto FillWith(uint8_t fill) {
  return [fill](std::span<uint8_t> out) {
    std::fill(out.begin(), out.end(), fill);
    return Status::Ok();
  };
}

namespace schema = kvtier::rpc::schema;

// A store of an older build: its put and openPut are the real store's, and it knows no
// openPutSession (UNIMPLEMENTED, as Cap'n Proto answers a method it does not have).
class NoPutSessions final : public schema::BlockStore::Server {
 public:
  explicit NoPutSessions(schema::BlockStore::Client store) : store_(kj::mv(store)) {}

 protected:
  kj::Promise<void> put(PutContext call) override {
    auto request = store_.putRequest();
    request.setBlocks(call.getParams().getBlocks());
    return call.tailCall(kj::mv(request));
  }
  kj::Promise<void> openPut(OpenPutContext call) override {
    auto request = store_.openPutRequest();
    request.setHeaders(call.getParams().getHeaders());
    return call.tailCall(kj::mv(request));
  }

 private:
  schema::BlockStore::Client store_;
};

class RemoteStoreWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::TieredStoreOptions tiers;
    tiers.host.emplace();
    tiers.host->capacity_bytes = 1 << 20;
    tiers.host->page_bytes = 4096;
    tiers.host->try_huge_pages = false;
    store_ = storage::TieredStore::Create(std::move(tiers)).value();
    stream_ = store::DataStreamServer::Create({.store = store_.get(), .clock = &clock_}).value();
    node_ = testing::StartCoordinatorWithStoreNode(
        registry_,
        [this](const auth::Tenant& tenant) -> kj::Own<capnp::Capability::Server> {
          auto service = store::MakeBlockStoreService(
              {.store = store_.get(), .stream = stream_on_ ? stream_.get() : nullptr}, tenant);
          if (put_sessions_) return service;
          return kj::heap<NoPutSessions>(
              capnp::Capability::Client(kj::mv(service)).castAs<schema::BlockStore>());
        },
        "store-0/store");
    nodes_ = NodeConnections::Create(
                 {.coordinator_address = node_->endpoints()[0], .token = "auth is off"})
                 .value();
  }

  std::unique_ptr<RemoteStoreWriter> Writer(std::vector<std::string> store_nodes,
                                            uint64_t queue_bytes, uint64_t batch_bytes) {
    // A registry each: a writer's metrics are registered once per registry.
    return RemoteStoreWriter::Create({.connections = nodes_.get(),
                                      .registry = &writer_registries_.emplace_back(),
                                      .store_nodes = std::move(store_nodes),
                                      .max_queued_bytes = queue_bytes,
                                      .batch_bytes = batch_bytes})
        .value();
  }

  // The stored copy of block `key` under `scope`, or the read's error.
  Result<std::vector<uint8_t>> Stored(uint64_t key, uint64_t scope) {
    std::vector<uint8_t> out(kBlockBytes);
    Result<storage::TieredHit> hit = store_->Get({BlockKey{7, key}, kFormat, scope}, out);
    if (!hit.ok()) return hit.status();
    return out;
  }

  // Writes `n` blocks from `first` under scope 100 in one batch and waits for them.
  void WriteAndFlush(RemoteStoreWriter& writer, uint64_t first, uint64_t n) {
    for (uint64_t key = first; key < first + n; ++key)
      ASSERT_TRUE(writer.Write(Header(key, 100), FillWith(1)));
    writer.Submit();
    ASSERT_TRUE(writer.Flush(10s).ok());
  }

  FakeClock clock_;  // the data stream's: its sessions' idle time
  MetricsRegistry registry_, options_registry_;
  std::deque<MetricsRegistry> writer_registries_;  // one per writer, the last writer's last
  std::unique_ptr<storage::TieredStore> store_;
  std::unique_ptr<store::DataStreamServer> stream_;
  bool stream_on_ = true;     // read when a writer opens its session with the store
  bool put_sessions_ = true;  // false: the store answers openPutSession UNIMPLEMENTED
  std::unique_ptr<coordinator::CoordinatorNode> node_;
  std::unique_ptr<NodeConnections> nodes_;
};

TEST_F(RemoteStoreWriterTest, CommittedBlocksLandUnderTheirScopes) {
  // Batches of two blocks: five blocks go as three puts.
  auto writer = Writer({"store-0/store"}, 1 << 20, 2 * kBlockBytes);
  for (uint64_t key = 1; key <= 5; ++key) {
    const uint64_t scope = key % 2 == 0 ? 100 : 200;  // two tenants' blocks
    ASSERT_TRUE(writer->Write(Header(key, scope), FillWith(uint8_t(0x10 + key))));
  }
  writer->Submit();
  ASSERT_TRUE(writer->Flush(10s).ok());

  const RemoteStoreWriterStats stats = writer->Stats();
  EXPECT_EQ(stats.written_blocks, 5u);
  EXPECT_EQ(stats.streamed_blocks, 5u) << "the store runs a data stream";
  EXPECT_EQ(stream_->Stats().puts, 3u);
  EXPECT_EQ(stream_->Stats().sessions, 1u) << "one put session carried the three batches";
  EXPECT_EQ(stats.written_bytes, 5 * kBlockBytes);
  EXPECT_EQ(stats.failed_blocks, 0u);
  EXPECT_EQ(stats.queued_bytes, 0u);
  for (uint64_t key = 1; key <= 5; ++key) {
    const uint64_t scope = key % 2 == 0 ? 100 : 200;
    Result<std::vector<uint8_t>> stored = Stored(key, scope);
    ASSERT_TRUE(stored.ok()) << "block " << key << ": " << stored.status();
    EXPECT_EQ(std::count(stored->begin(), stored->end(), uint8_t(0x10 + key)),
              std::ptrdiff_t(kBlockBytes));
    EXPECT_EQ(Stored(key, scope == 100 ? 200 : 100).status().code(), StatusCode::kNotFound)
        << "block " << key << " is not readable under the other tenant's scope";
  }
  auto header = store_->Peek({BlockKey{7, 3}, kFormat, 200});
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->priority, 60) << "the block keeps its priority";
  const std::string exposition = writer_registries_.back().Exposition();
  EXPECT_NE(exposition.find("kvtier_worker_store_writes_blocks_total{result=\"written\"} 5"),
            std::string::npos)
      << exposition;
}

TEST_F(RemoteStoreWriterTest, AStoreWithoutADataStreamTakesTheBatchesInline) {
  stream_on_ = false;  // as with TLS on: openPut answers UNIMPLEMENTED
  auto writer = Writer({"store-0/store"}, 1 << 20, 2 * kBlockBytes);
  for (uint64_t key = 1; key <= 3; ++key)
    ASSERT_TRUE(writer->Write(Header(key, 100), FillWith(uint8_t(key))));
  writer->Submit();
  ASSERT_TRUE(writer->Flush(10s).ok());
  const RemoteStoreWriterStats stats = writer->Stats();
  EXPECT_EQ(stats.written_blocks, 3u);
  EXPECT_EQ(stats.streamed_blocks, 0u);
  EXPECT_EQ(stats.failed_blocks, 0u);
  EXPECT_EQ(stream_->Stats().puts, 0u);
  for (uint64_t key = 1; key <= 3; ++key) {
    Result<std::vector<uint8_t>> stored = Stored(key, 100);
    ASSERT_TRUE(stored.ok()) << "block " << key << ": " << stored.status();
    EXPECT_EQ(stored->front(), uint8_t(key));
  }
}

// The writer's put session sits idle past the stream's ticket ttl and the store drops it:
// the next batch is refused (kNotFound), a session is opened again, and the batch goes.
TEST_F(RemoteStoreWriterTest, APutSessionTheStoreForgotIsOpenedAgain) {
  auto writer = Writer({"store-0/store"}, 1 << 20, 4 * kBlockBytes);
  WriteAndFlush(*writer, 1, 2);
  clock_.Advance(std::chrono::seconds(31));  // the ttl is 30 s by default
  WriteAndFlush(*writer, 3, 2);
  const RemoteStoreWriterStats stats = writer->Stats();
  EXPECT_EQ(stats.written_blocks, 4u);
  EXPECT_EQ(stats.streamed_blocks, 4u);
  EXPECT_EQ(stats.failed_blocks, 0u);
  EXPECT_EQ(stream_->Stats().refused, 1u) << "the idle session, once";
  EXPECT_EQ(stream_->Stats().sessions, 1u);
  EXPECT_TRUE(Stored(4, 100).ok());
}

TEST_F(RemoteStoreWriterTest, AStoreWithoutPutSessionsTakesBatchesByTicketOnItsStream) {
  put_sessions_ = false;
  auto writer = Writer({"store-0/store"}, 1 << 20, 2 * kBlockBytes);
  WriteAndFlush(*writer, 1, 4);  // two batches
  const RemoteStoreWriterStats stats = writer->Stats();
  EXPECT_EQ(stats.written_blocks, 4u);
  EXPECT_EQ(stats.streamed_blocks, 4u) << "on the stream all the same";
  EXPECT_EQ(stream_->Stats().puts, 2u);
  EXPECT_EQ(stream_->Stats().sessions, 0u);
  for (uint64_t key = 1; key <= 4; ++key) EXPECT_TRUE(Stored(key, 100).ok()) << "block " << key;
}

TEST_F(RemoteStoreWriterTest, AFullQueueSkipsBlocksInsteadOfWaiting) {
  // Room for two blocks, in one batch; nothing submitted yet, so both stay queued.
  auto writer = Writer({"store-0/store"}, 2 * kBlockBytes, 2 * kBlockBytes);
  EXPECT_TRUE(writer->Write(Header(1, 100), FillWith(1)));
  EXPECT_TRUE(writer->Write(Header(2, 100), FillWith(2)));
  EXPECT_FALSE(writer->Write(Header(3, 100), FillWith(3))) << "a third does not fit";
  EXPECT_EQ(writer->Stats().skipped_blocks, 1u);
  writer->Submit();
  ASSERT_TRUE(writer->Flush(10s).ok());
  EXPECT_EQ(writer->Stats().written_blocks, 2u);
  EXPECT_TRUE(Stored(2, 100).ok());
  EXPECT_EQ(Stored(3, 100).status().code(), StatusCode::kNotFound);
  // The queue drained: there is room again.
  EXPECT_TRUE(writer->Write(Header(3, 100), FillWith(3)));
}

TEST_F(RemoteStoreWriterTest, ABlockWhoseBytesCannotBeReadIsNotQueued) {
  auto writer = Writer({"store-0/store"}, 1 << 20, 4 * kBlockBytes);
  ASSERT_TRUE(writer->Write(Header(1, 100), FillWith(1)));
  EXPECT_FALSE(writer->Write(
      Header(2, 100), [](std::span<uint8_t>) { return InternalError("device read failed"); }));
  EXPECT_EQ(writer->Stats().queued_bytes, kBlockBytes) << "block 2 took nothing";
  ASSERT_TRUE(writer->Write(Header(3, 100), FillWith(3)));
  writer->Submit();
  ASSERT_TRUE(writer->Flush(10s).ok());
  EXPECT_EQ(writer->Stats().written_blocks, 2u);
  Result<std::vector<uint8_t>> third = Stored(3, 100);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ((*third)[0], 3) << "block 3's bytes are its own, not block 2's attempt";
  EXPECT_EQ(Stored(2, 100).status().code(), StatusCode::kNotFound);
}

// A block its node could not give the writer (its format past the interning bound) is a
// failed write, in the stats and the metric; nothing is queued for it.
TEST_F(RemoteStoreWriterTest, ABlockRefusedBeforeTheWriterIsCountedAsFailed) {
  auto writer = Writer({"store-0/store"}, 1 << 20, 4 * kBlockBytes);
  writer->CountRefused();
  writer->CountRefused();
  EXPECT_EQ(writer->Stats().failed_blocks, 2u);
  EXPECT_EQ(writer->Stats().queued_bytes, 0u);
  const std::string exposition = writer_registries_.back().Exposition();
  EXPECT_NE(exposition.find("kvtier_worker_store_writes_blocks_total{result=\"failed\"} 2"),
            std::string::npos)
      << exposition;
}

TEST_F(RemoteStoreWriterTest, AStoreThatIsNotLiveFailsBatchesWithoutStallingTheWriter) {
  auto writer = Writer({"gone/store"}, 1 << 20, kBlockBytes);
  for (uint64_t key = 1; key <= 3; ++key) ASSERT_TRUE(writer->Write(Header(key, 100), FillWith(1)));
  writer->Submit();
  ASSERT_TRUE(writer->Flush(10s).ok());
  const RemoteStoreWriterStats stats = writer->Stats();
  EXPECT_EQ(stats.failed_blocks, 3u);
  EXPECT_EQ(stats.written_blocks, 0u);
  EXPECT_EQ(stats.queued_bytes, 0u) << "failed batches leave the queue";
}

// Which of blocks first..first+n-1 a writer puts into store-0 (the only live store), as
// offsets from `first`; store-0 is emptied of them again for the next writer.
std::set<uint64_t> LandedAtStore0(storage::TieredStore& store,
                                  std::unique_ptr<RemoteStoreWriter> writer, uint64_t first,
                                  uint64_t n) {
  for (uint64_t key = first; key < first + n; ++key)
    EXPECT_TRUE(writer->Write(Header(key, 100), FillWith(1)));
  writer->Submit();
  EXPECT_TRUE(writer->Flush(10s).ok());
  std::set<uint64_t> landed;
  for (uint64_t key = first; key < first + n; ++key) {
    if (store.Contains({BlockKey{7, key}, kFormat, 100})) landed.insert(key - first);
  }
  const RemoteStoreWriterStats stats = writer->Stats();
  EXPECT_EQ(stats.written_blocks, landed.size());
  EXPECT_EQ(stats.written_blocks + stats.failed_blocks, n)
      << "the rest went to stores that are not live";
  for (uint64_t offset : landed)
    EXPECT_TRUE(store.Remove({BlockKey{7, first + offset}, kFormat, 100}).ok());
  return landed;
}

TEST_F(RemoteStoreWriterTest, BlocksAreSpreadOverTheStoresByKey) {
  constexpr uint64_t kBlocks = 64;
  // Two stores: store-0 takes about half of blocks 1000-1063, gone/store (not live) the rest.
  const std::set<uint64_t> two = LandedAtStore0(
      *store_, Writer({"store-0/store", "gone/store"}, 1 << 20, 4096), 1000, kBlocks);
  EXPECT_GT(two.size(), kBlocks / 4);
  EXPECT_LT(two.size(), kBlocks * 3 / 4);
  // A second worker naming the same stores in the other order sends the same blocks to each.
  EXPECT_EQ(LandedAtStore0(*store_, Writer({"gone/store", "store-0/store"}, 1 << 20, 4096), 1000,
                           kBlocks),
            two);
  // A third store takes only its share: no block moves from one old store to the other.
  const std::set<uint64_t> three = LandedAtStore0(
      *store_, Writer({"store-0/store", "gone/store", "gone-2/store"}, 1 << 20, 4096), 1000,
      kBlocks);
  EXPECT_LT(three.size(), two.size());
  for (uint64_t offset : three)
    EXPECT_TRUE(two.count(offset)) << "block " << 1000 + offset << " moved to store-0";
}

TEST_F(RemoteStoreWriterTest, OptionsAreChecked) {
  EXPECT_EQ(RemoteStoreWriter::Create({.connections = nodes_.get(), .registry = &options_registry_})
                .status()
                .code(),
            StatusCode::kInvalidArgument)
      << "no store node";
  auto twice = RemoteStoreWriter::Create({.connections = nodes_.get(),
                                          .registry = &options_registry_,
                                          .store_nodes = {"s/store", "s/store"}});
  EXPECT_EQ(twice.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(twice.status().message().find("\"s/store\" is empty or named twice"), std::string::npos)
      << twice.status();
  auto bad_batch = RemoteStoreWriter::Create({.connections = nodes_.get(),
                                              .registry = &options_registry_,
                                              .store_nodes = {"store-0/store"},
                                              .max_queued_bytes = 10,
                                              .batch_bytes = 20});
  EXPECT_EQ(bad_batch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_batch.status().message().find("batch_bytes"), std::string::npos)
      << bad_batch.status();
}

}  // namespace
}  // namespace kvtier::worker
