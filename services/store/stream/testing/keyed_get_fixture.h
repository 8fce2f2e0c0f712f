// Test fixture: keyed gets of a data stream over a host tier of 1 MiB over a disk tier,
// with the keys each session's callback saw. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <vector>

#include "common/mutex.h"
#include "services/store/stream/data_stream_client.h"
#include "services/store/stream/data_stream_server.h"
#include "services/store/stream/testing/data_stream_fixture.h"
#include "services/store/stream/testing/pool_source.h"
#include "storage/testing/blocks.h"
#include "storage/testing/tiered_stores.h"
#include "tests/testing/test_util.h"

namespace kvtier::store {

// A host tier of 1 MiB over a disk tier, behind a data stream on loopback.
class KeyedGetTest : public DataStreamFixture {
 protected:
  static constexpr size_t kBlockBytes = 64 * 1024;
  using TestBlock = storage::testing::TestBlock;
  static constexpr uint64_t kScope = storage::testing::kScope;
  void SetUp() override { StartNode(storage::testing::HostOverDisk(1u << 20, dir_.path())); }
  // The node goes before its disk tier's directory (a member of this class, destroyed
  // before the fixture's).
  void TearDown() override {
    server_.reset();
    store_.reset();
  }

  TransferTicket Session(uint64_t scope = kScope,
                         std::shared_ptr<ExtraBlockSource> extra = nullptr) {
    return server_
        ->OpenSession({.format_tag = storage::testing::kFormat,
                       .salt_scope = scope,
                       .on_request =
                           [this](std::span<const BlockKey> keys) {
                             MutexLock lock(mu_);
                             requested_.insert(requested_.end(), keys.begin(), keys.end());
                           },
                       .extra = std::move(extra)})
        .value();
  }
  void Store(const std::vector<TestBlock>& blocks) {
    for (const TestBlock& b : blocks) ASSERT_TRUE(store_->Put(b.header, b.payload).ok());
  }
  static std::vector<BlockKey> Keys(const std::vector<uint64_t>& ids) {
    std::vector<BlockKey> keys;
    for (uint64_t id : ids) keys.push_back(storage::testing::MakeBlock(id, 1).header.key);
    return keys;
  }

  // A keyed get into buffers of their own; `asked` records which blocks buffer_for saw.
  struct Got {
    DataStreamClient::KeyedGet get;
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<size_t> asked;
  };
  static Result<Got> GetKeys(DataStreamClient& client, const TransferTicket& session,
                             const std::vector<uint64_t>& ids) {
    Got got;
    got.bytes.resize(ids.size());
    KVTIER_ASSIGN_OR_RETURN(got.get, client.GetKeys(session, Keys(ids), BuffersOf(got)));
    return got;
  }
  // The reply of the oldest pipelined get, of `keys` keys, into buffers of its own.
  static Result<Got> ReceiveGetKeys(DataStreamClient& client, size_t keys) {
    Got got;
    got.bytes.resize(keys);
    KVTIER_ASSIGN_OR_RETURN(got.get, client.ReceiveGetKeys(BuffersOf(got)));
    return got;
  }
  static DataStreamClient::BufferFor BuffersOf(Got& got) {
    return [&got](size_t i, const storage::BlockHeader& header) {
      got.asked.push_back(i);
      got.bytes[i].resize(header.payload_bytes);
      return std::span<uint8_t>(got.bytes[i]);
    };
  }

  // A keyed get of keys 5, 8, 6 and 9 from `source`, whose `pool` is blocks 5, 6 and 8 in
  // that order: the first three come with their bytes and their checksums, 9 is missing.
  void GetFiveEightSixNine(const std::shared_ptr<PoolSource>& source,
                           const std::vector<TestBlock>& pool) {
    auto client = Client();
    Result<Got> read = GetKeys(*client, Session(kScope, source), {5, 8, 6, 9});
    ASSERT_TRUE(read.ok()) << read.status();
    const Got& got = *read;
    EXPECT_EQ(got.get.states, (std::vector<StreamBlockState>{
                                  StreamBlockState::kPresent, StreamBlockState::kPresent,
                                  StreamBlockState::kPresent, StreamBlockState::kMissing}));
    const size_t order[] = {0, 2, 1};  // keys 5, 8, 6 are pool blocks 0, 2, 1
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(got.bytes[i], pool[order[i]].payload) << "key " << i;
      ASSERT_TRUE(got.get.headers[i]);
      EXPECT_EQ(got.get.headers[i]->checksum, pool[order[i]].header.checksum) << "key " << i;
    }
  }

  kvtier::testing::TempDir dir_;
  Mutex mu_;
  std::vector<BlockKey> requested_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier::store
