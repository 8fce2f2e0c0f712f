// The BlockStore capability over a real loopback connection: blocks put by a tenant come
// back byte for byte, never to another tenant or another format; bad batches store
// nothing.
#include "services/store/rpc/store_service.h"

#include <capnp/ez-rpc.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "services/rpc/rpc_server.h"
#include "services/rpc/schema/kvtier.capnp.h"
#include "services/rpc/session_service.h"
#include "services/rpc/status_mapping.h"
#include "services/store/rpc/block_header_wire.h"
#include "services/store/rpc/testing/block_store_client.h"
#include "storage/testing/blocks.h"

namespace kvtier::store {
namespace {

namespace schema = kvtier::rpc::schema;
using storage::testing::MakeBlock;
using storage::testing::TestBlock;
using Client = testing::BlockStoreClient;
const std::string kTokenA(40, 'a');
const std::string kTokenB(40, 'b');
const std::string kNodeToken(40, 'n');

// Blocks held outside the tiers (as a worker's pool is), under one scope; `gone` ones
// answer Peek but are evicted by the time they are read.
// A worker's pool of `salt`'s blocks: held, as every pool holds them, under the keys of
// the tenant's key space (KeySalt). `gone`: the ids of blocks evicted between Peek and Read.
class FakeExtraSource final : public ExtraBlockSource {
 public:
  FakeExtraSource(std::string_view salt, std::vector<TestBlock> blocks, std::vector<uint64_t> gone)
      : scope_(SaltScope(salt)), blocks_(std::move(blocks)), gone_(std::move(gone)) {
    for (TestBlock& block : blocks_) block.header.key = KeySalt(salt).Apply(block.header.key);
    for (uint64_t id : gone_) ids_.push_back(KeySalt(salt).Apply(MakeBlock(id, 1).header.key));
  }
  Result<storage::BlockHeader> Peek(const storage::BlockRef& ref) override {
    KVTIER_ASSIGN_OR_RETURN(const TestBlock* block, Find(ref));
    storage::BlockHeader header = block->header;
    header.salt_scope = scope_;
    header.checksum = 0;  // as a pool's Peek: not computed
    return header;
  }
  Result<storage::BlockHeader> Read(const storage::BlockRef& ref, std::span<uint8_t> out) override {
    KVTIER_ASSIGN_OR_RETURN(const TestBlock* block, Find(ref));
    if (std::find(ids_.begin(), ids_.end(), ref.key) != ids_.end())
      return NotFoundError("evicted since Peek");
    std::copy(block->payload.begin(), block->payload.end(), out.begin());
    storage::BlockHeader header = block->header;
    header.salt_scope = scope_;
    header.checksum = 0;  // as a pool's Read: the server hashes the bytes
    return header;
  }
  std::vector<Result<storage::BlockHeader>> ReadBatch(
      std::span<const storage::BlockRef> refs, std::span<const std::span<uint8_t>> outs) override {
    batches.push_back(refs.size());
    return ExtraBlockSource::ReadBatch(refs, outs);
  }
  std::vector<size_t> batches;  // blocks per ReadBatch call

 private:
  Result<const TestBlock*> Find(const storage::BlockRef& ref) const {
    for (const TestBlock& b : blocks_) {
      if (b.header.key == ref.key && ref.salt_scope == scope_ &&
          b.header.format_tag == ref.format_tag)
        return &b;
    }
    return NotFoundError("not held");
  }
  uint64_t scope_;
  std::vector<TestBlock> blocks_;
  std::vector<uint64_t> gone_;
  std::vector<BlockKey> ids_;  // gone_'s keys
};

class StoreServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::TieredStoreOptions options;
    options.host.emplace();
    options.host->capacity_bytes = 1 << 20;
    options.host->try_huge_pages = false;
    store_ = storage::TieredStore::Create(std::move(options)).value();
    stream_ = DataStreamServer::Create({.store = store_.get()}).value();
    tokens_ = auth::TokenStore::FromYaml(
                  "tenants:\n"
                  "  - {name: team-a, token: " +
                      kTokenA +
                      ", salt: salt-a}\n"
                      "  - {name: team-b, token: " +
                      kTokenB +
                      ", salt: salt-b}\n"
                      "nodes:\n"
                      "  - {name: cluster-nodes, token: " +
                      kNodeToken + "}\n",
                  "tokens")
                  .value();
    session_.identity = {"s1", {"store"}};
    session_.tokens = &tokens_;
    session_.clock = &SystemClock::Instance();
    session_.store = [this](const auth::Tenant& tenant) {
      return MakeBlockStoreService({.store = store_.get(),
                                    .extra = extra_,
                                    .stream = stream_on_ ? stream_.get() : nullptr,
                                    .limits = {.max_blocks_per_call = 8}},
                                   tenant);
    };
    rpc::RpcServerOptions server;
    server.listen = {"127.0.0.1:0"};
    server_ = rpc::RpcServer::Create(std::move(server), rpc::SessionBootstraps(session_)).value();
    address_ = server_->endpoints()[0];
  }
  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<storage::TieredStore> store_;
  std::unique_ptr<DataStreamServer> stream_;
  bool stream_on_ = true;              // read when a session opens its BlockStore
  ExtraBlockSource* extra_ = nullptr;  // likewise
  auth::TokenStore tokens_ = auth::TokenStore::Disabled();
  rpc::SessionContext session_;
  std::unique_ptr<rpc::RpcServer> server_;
  std::string address_;
};

TEST_F(StoreServiceTest, BlocksComeBackToTheirTenantOnly) {
  Client a(address_, kTokenA), b(address_, kTokenB);
  // Team A stores blocks 1 and 2.
  const std::vector<TestBlock> blocks = {MakeBlock(1, 3000), MakeBlock(2, 70000)};
  ASSERT_EQ(a.Put(blocks).value_or(0), 2u);
  auto got = a.Get({1, 2, 3}, storage::testing::kFormat);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0],
            (std::pair<std::string, std::vector<uint8_t>>{"present", blocks[0].payload}));
  EXPECT_EQ((*got)[1].second, blocks[1].payload);
  EXPECT_EQ((*got)[2].first, "missing");
  // Team B asks for the same keys: nothing, as if they did not exist; another format: nothing.
  EXPECT_EQ(b.Get({1, 2}, storage::testing::kFormat)->at(0).first, "missing");
  EXPECT_EQ(a.Get({1}, "other-model|L1/H1/D8/T16/fp16/W0/S0|none")->at(0).first, "missing");
  // Naming team A's scope from team B's session is refused.
  auto spoof = b.store().containsRequest();
  spoof.initKeys(1)[0].setLo(1);
  spoof.setSaltScope(SaltScope("salt-a"));
  EXPECT_EQ(b.Call(kj::mv(spoof)).status().code(), StatusCode::kPermissionDenied);
  auto remove = a.store().removeRequest();
  auto keys = remove.initKeys(1);
  keys[0].setHi(0x1234);
  keys[0].setLo(1);
  remove.setFormatTag(storage::testing::kFormat);
  EXPECT_EQ(a.Call(kj::mv(remove))->getRemoved(), 1u);
  EXPECT_EQ(a.Get({1}, storage::testing::kFormat)->at(0).first, "missing");
}

// Block `id`'s key over the bytes of block `bytes_of`: another tenant's block of the same tokens.
TestBlock SameKeyOtherBytes(uint64_t id, uint64_t bytes_of, size_t bytes) {
  TestBlock block = MakeBlock(bytes_of, bytes);
  block.header.key = MakeBlock(id, 1).header.key;
  block.header.parent = MakeBlock(id, 1).header.parent;
  return block;
}

// Two tenants send the same keys: each stores, finds, reads and removes its own blocks,
// inline and on the data stream, and B's answers never show that A holds the keys.
TEST_F(StoreServiceTest, TwoTenantsStoreTheSameKeysSideBySide) {
  Client a(address_, kTokenA), b(address_, kTokenB);
  const TestBlock mine = MakeBlock(1, 3000), theirs = SameKeyOtherBytes(1, 101, 3000);
  ASSERT_EQ(a.Put({mine}).value_or(0), 1u);
  auto present = b.store().containsRequest();
  present.initKeys(1)[0].setHi(mine.header.key.hi);
  present.getKeys()[0].setLo(mine.header.key.lo);
  present.setFormatTag(storage::testing::kFormat);
  EXPECT_FALSE(b.Call(kj::mv(present))->getPresent()[0]) << "B learns nothing of A's block";
  ASSERT_EQ(b.Put({theirs}).value_or(0), 1u) << "A's copy never stands in B's way";
  EXPECT_EQ(a.Get({1}, storage::testing::kFormat)->at(0).second, mine.payload);
  EXPECT_EQ(b.Get({1}, storage::testing::kFormat)->at(0).second, theirs.payload);
  EXPECT_EQ(b.StreamGet({1}, storage::testing::kFormat)->at(0).second, theirs.payload);
  EXPECT_EQ(b.KeyedGet({1}, storage::testing::kFormat)->at(0).second, theirs.payload);
  // On the stream too: B's keyed put of key 2 beside A's.
  const TestBlock mine_2 = MakeBlock(2, 5000), theirs_2 = SameKeyOtherBytes(2, 102, 5000);
  ASSERT_EQ(a.StreamPut({mine_2}).value_or(0), 1u);
  ASSERT_EQ(b.KeyedPut({theirs_2}).value_or(0), 1u);
  EXPECT_EQ(a.KeyedGet({2}, storage::testing::kFormat)->at(0).second, mine_2.payload);
  EXPECT_EQ(b.Get({2}, storage::testing::kFormat)->at(0).second, theirs_2.payload);
  // B's remove takes B's block only.
  auto remove = b.store().removeRequest();
  remove.initKeys(1)[0].setHi(mine.header.key.hi);
  remove.getKeys()[0].setLo(mine.header.key.lo);
  remove.setFormatTag(storage::testing::kFormat);
  EXPECT_EQ(b.Call(kj::mv(remove))->getRemoved(), 1u);
  EXPECT_EQ(b.Get({1}, storage::testing::kFormat)->at(0).first, "missing");
  EXPECT_EQ(a.Get({1}, storage::testing::kFormat)->at(0).second, mine.payload);
}

// Blocks 5 and 6 are held outside the tiers (a worker's pool), block 6 evicted between
// Peek and Read; block 1 is in the tiers; block 9 nowhere. The pool's blocks are read in
// one batch, inline, on the data stream by openGet and by keyed gets alike (the last
// from the stream's threads, through the server's loop that the pool lives on).
TEST_F(StoreServiceTest, BlocksOutsideTheTiersAreReadInOneBatch) {
  const std::vector<TestBlock> pool = {MakeBlock(5, 4096), MakeBlock(6, 4096)};
  FakeExtraSource source("salt-a", pool, {6});
  extra_ = &source;
  Client a(address_, kTokenA);
  const TestBlock tiered = MakeBlock(1, 2048);
  ASSERT_EQ(a.Put({tiered}).value_or(0), 1u);
  for (const std::string way : {"inline", "openGet", "keyed"}) {
    auto got = way == "inline"    ? a.Get({1, 5, 6, 9}, storage::testing::kFormat)
               : way == "openGet" ? a.StreamGet({1, 5, 6, 9}, storage::testing::kFormat)
                                  : a.KeyedGet({1, 5, 6, 9}, storage::testing::kFormat);
    ASSERT_TRUE(got.ok()) << way << ": " << got.status();
    EXPECT_EQ((*got)[0], (std::pair<std::string, std::vector<uint8_t>>{"present", tiered.payload}))
        << way;
    EXPECT_EQ((*got)[1], (std::pair<std::string, std::vector<uint8_t>>{"present", pool[0].payload}))
        << way;
    EXPECT_EQ((*got)[2].first, "missing") << way << ": evicted between Peek and Read";
    EXPECT_EQ((*got)[3].first, "missing") << way;
  }
  EXPECT_EQ(source.batches, (std::vector<size_t>{2, 2, 2}))
      << "blocks 5 and 6 in one batch per get";
}

TEST_F(StoreServiceTest, ANodeReadsATenantsBlocksOnlyUnderTheScopeItNames) {
  Client a(address_, kTokenA), node(address_, kNodeToken);
  ASSERT_EQ(a.Put({MakeBlock(1, 3000)}).value_or(0), 1u);
  auto get = [&](uint64_t scope) {
    auto request = node.store().getRequest();
    // A node names the key that team A's block is stored under: in team A's key space.
    const BlockKey key = KeySalt("salt-a").Apply(MakeBlock(1, 1).header.key);
    auto keys = request.initKeys(1);
    keys[0].setHi(key.hi);
    keys[0].setLo(key.lo);
    request.setFormatTag(storage::testing::kFormat);
    request.setSaltScope(scope);
    auto response = node.Call(kj::mv(request));
    return response.ok() && response->getStates()[0] == schema::BlockState::PRESENT;
  };
  EXPECT_TRUE(get(SaltScope("salt-a"))) << "a worker fetching team A's block on its behalf";
  EXPECT_FALSE(get(SaltScope("salt-b"))) << "under team B's scope the block does not exist";
  EXPECT_FALSE(get(0)) << "a node's own scope holds no tenant's blocks";
}

TEST_F(StoreServiceTest, ABadBlockRefusesTheWholeBatch) {
  Client a(address_, kTokenA);
  std::vector<TestBlock> blocks = {MakeBlock(1, 1000), MakeBlock(2, 1000)};
  blocks[1].payload[10] ^= 1;  // block 2's bytes no longer match its checksum
  const Status refused = a.Put(blocks).status();
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("block 1"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("checksum"), std::string::npos) << refused.message();
  EXPECT_EQ(a.Get({1}, storage::testing::kFormat)->at(0).first, "missing")
      << "nothing of the batch stored";

  std::vector<TestBlock> no_format = {MakeBlock(3, 100, 35, 7, "")};
  EXPECT_EQ(a.Put(no_format).status().code(), StatusCode::kInvalidArgument);
  const std::vector<TestBlock> long_format = {MakeBlock(4, 100, 35, 7, std::string(300, 'f'))};
  const Status long_refused = a.Put(long_format).status();
  EXPECT_EQ(long_refused.code(), StatusCode::kInvalidArgument) << long_refused;
  EXPECT_NE(long_refused.message().find("300 bytes"), std::string::npos) << long_refused;
  std::vector<TestBlock> too_many;
  for (uint64_t i = 0; i < 9; ++i) too_many.push_back(MakeBlock(i, 16));
  EXPECT_NE(a.Put(too_many).status().message().find("at most 8"), std::string::npos);
  EXPECT_EQ(store_->Stats().host->blocks, 0u);
}

TEST_F(StoreServiceTest, TheDataStreamCarriesBlocksToTheirTenantOnly) {
  Client a(address_, kTokenA), b(address_, kTokenB);
  // Team A streams blocks 1 and 2 in; they come back through the stream and inline alike.
  const std::vector<TestBlock> blocks = {MakeBlock(1, 3000), MakeBlock(2, 70000)};
  ASSERT_EQ(a.StreamPut(blocks).value_or(0), 2u);
  auto got = a.StreamGet({1, 3, 2}, storage::testing::kFormat);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0],
            (std::pair<std::string, std::vector<uint8_t>>{"present", blocks[0].payload}));
  EXPECT_EQ((*got)[1].first, "missing");
  EXPECT_EQ((*got)[2].second, blocks[1].payload);
  EXPECT_EQ(a.Get({2}, storage::testing::kFormat)->at(0).second, blocks[1].payload);
  auto keyed = a.KeyedGet({1, 3, 2}, storage::testing::kFormat);  // and through a get session
  ASSERT_TRUE(keyed.ok()) << keyed.status();
  EXPECT_EQ(*keyed, *got);
  // Team B: nothing under its salt; naming A's scope at open is refused.
  EXPECT_EQ(b.StreamGet({1, 2}, storage::testing::kFormat)->at(0).first, "missing");
  EXPECT_EQ(b.KeyedGet({1, 2}, storage::testing::kFormat)->at(1).first, "missing");
  EXPECT_EQ(b.KeyedGet({1}, storage::testing::kFormat, SaltScope("salt-a")).status().code(),
            StatusCode::kPermissionDenied);
  // Keyed puts land under the tenant's scope too: A's blocks 4 and 5, read back by A only.
  const std::vector<TestBlock> keyed_blocks = {MakeBlock(4, 5000), MakeBlock(5, 300)};
  ASSERT_EQ(a.KeyedPut(keyed_blocks).value_or(0), 2u);
  EXPECT_EQ(a.KeyedGet({4, 5}, storage::testing::kFormat)->at(1).second, keyed_blocks[1].payload);
  EXPECT_EQ(b.KeyedGet({4}, storage::testing::kFormat)->at(0).first, "missing");
  EXPECT_EQ(b.KeyedPut(keyed_blocks, SaltScope("salt-a")).status().code(),
            StatusCode::kPermissionDenied);
  auto spoof = b.store().openGetRequest();
  spoof.initKeys(1)[0].setLo(1);
  spoof.setSaltScope(SaltScope("salt-a"));
  spoof.setFormatTag(storage::testing::kFormat);
  EXPECT_EQ(b.Call(kj::mv(spoof)).status().code(), StatusCode::kPermissionDenied);
}

TEST_F(StoreServiceTest, ABadStreamedPutIsRefusedAtOpenOrOnTheStreamAndStoresNothing) {
  Client a(address_, kTokenA);
  std::vector<TestBlock> no_format = {MakeBlock(3, 100, 35, 7, "")};
  const Status at_open = a.StreamPut(no_format).status();
  EXPECT_EQ(at_open.code(), StatusCode::kInvalidArgument) << at_open;
  EXPECT_NE(at_open.message().find("block 0"), std::string::npos) << at_open.message();
  std::vector<TestBlock> too_many;
  for (uint64_t i = 0; i < 9; ++i) too_many.push_back(MakeBlock(i, 16));
  EXPECT_NE(a.StreamPut(too_many).status().message().find("at most 8"), std::string::npos);
  std::vector<TestBlock> damaged = {MakeBlock(1, 1000), MakeBlock(2, 1000)};
  damaged[1].payload[10] ^= 1;  // block 2's bytes no longer match its checksum
  const Status on_stream = a.StreamPut(damaged).status();
  EXPECT_EQ(on_stream.code(), StatusCode::kInvalidArgument) << on_stream;
  EXPECT_NE(on_stream.message().find("checksum"), std::string::npos) << on_stream.message();
  // The same three, as keyed puts: refused on the stream, the node's limits as at open.
  const Status keyed_no_format = a.KeyedPut(no_format).status();
  EXPECT_EQ(keyed_no_format.code(), StatusCode::kInvalidArgument) << keyed_no_format;
  EXPECT_NE(keyed_no_format.message().find("block 0"), std::string::npos)
      << keyed_no_format.message();
  const Status open_long_format =
      a.StreamPut({MakeBlock(4, 100, 35, 7, std::string(300, 'f'))}).status();
  EXPECT_EQ(open_long_format.code(), StatusCode::kInvalidArgument) << open_long_format;
  const Status keyed_long_format =
      a.KeyedPut({MakeBlock(4, 100, 35, 7, std::string(300, 'f'))}).status();
  EXPECT_EQ(keyed_long_format.code(), StatusCode::kInvalidArgument) << keyed_long_format;
  // Its header alone is more than a header may be: refused before it is decoded.
  EXPECT_NE(keyed_long_format.message().find("bytes of headers"), std::string::npos)
      << keyed_long_format;
  EXPECT_NE(a.KeyedPut(too_many).status().message().find("1 to 8"), std::string::npos);
  EXPECT_NE(a.KeyedPut(damaged).status().message().find("checksum"), std::string::npos);
  EXPECT_EQ(store_->Stats().host->blocks, 0u);
}

// A worker writing a tenant's blocks through on its behalf: a node's put session stores
// each block under the scope its header names.
TEST_F(StoreServiceTest, ANodesPutSessionStoresUnderTheScopeEachHeaderNames) {
  Client a(address_, kTokenA), node(address_, kNodeToken);
  // A node writes team A's block under its key in team A's key space, as a worker's
  // offload does; team A reads it under the key it computes.
  std::vector<TestBlock> blocks = {MakeBlock(1, 3000)};
  blocks[0].header.key = KeySalt("salt-a").Apply(blocks[0].header.key);
  ASSERT_EQ(node.KeyedPut(blocks, SaltScope("salt-a")).value_or(0), 1u);
  EXPECT_EQ(a.KeyedGet({1}, storage::testing::kFormat)->at(0).second, blocks[0].payload);
  EXPECT_EQ(node.KeyedGet({1}, storage::testing::kFormat)->at(0).first, "missing")
      << "not under the node's own";
}

TEST_F(StoreServiceTest, ANodeWithoutADataStreamSaysSo) {
  stream_on_ = false;
  Client a(address_, kTokenA);
  for (const Status& status : {a.StreamGet({1}, storage::testing::kFormat).status(),
                               a.KeyedGet({1}, storage::testing::kFormat).status(),
                               a.KeyedPut({MakeBlock(1, 100)}).status()}) {
    EXPECT_EQ(status.code(), StatusCode::kUnimplemented);
    EXPECT_NE(status.message().find("put/get"), std::string::npos) << status.message();
  }
}

}  // namespace
}  // namespace kvtier::store
