// The data stream on a node whose tiers include a disk: tier work that may wait for the
// disk runs off the event loops, so one transfer's disk I/O holds up no other.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "services/store/stream/data_stream_client.h"
#include "services/store/stream/data_stream_server.h"
#include "storage/testing/blocks.h"
#include "storage/testing/tiered_stores.h"
#include "tests/testing/test_util.h"

namespace kvtier::store {
namespace {

using storage::testing::kScope;
using storage::testing::MakeBlock;
using storage::testing::TestBlock;

// One event loop; a host tier of 1 MiB (16 pages of 64 KiB) over a disk whose writes the
// test holds: every block stored to disk waits on `disk_released` (a demotion is told as
// the disk's store from the thread that makes it).
class DataStreamDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::TieredStoreOptions tiers = storage::testing::HostOverDisk(1u << 20, dir_.path());
    tiers.on_event = [this](const storage::StoreEvent& event) {
      if (event.kind == storage::StoreEvent::Kind::kStored && event.tier == kvtier::Tier::kDisk) {
        disk_writes_started_.fetch_add(1);
        release_.wait();
      }
    };
    store_ = storage::TieredStore::Create(std::move(tiers)).value();
    server_ = DataStreamServer::Create({.store = store_.get(), .threads = 1}).value();
  }
  void TearDown() override {
    ReleaseDisk();
    server_.reset();
  }

  void ReleaseDisk() {
    if (!released_) release_promise_.set_value();
    released_ = true;
  }
  std::unique_ptr<DataStreamClient> Client() {
    return DataStreamClient::Connect(
               {.address = server_->address(), .timeout = std::chrono::seconds(10)})
        .value();
  }

  kvtier::testing::TempDir dir_;
  std::promise<void> release_promise_;
  std::shared_future<void> release_ = release_promise_.get_future().share();
  bool released_ = false;
  std::atomic<int> disk_writes_started_{0};
  std::unique_ptr<storage::TieredStore> store_;
  std::unique_ptr<DataStreamServer> server_;
};

// Block 1 (512 KiB) and block 2 (64 KiB, read last) fill most of the host tier. A put of
// block 3 (512 KiB) must first move block 1 down to disk, and that disk write is held.
// Meanwhile a get of block 2 on another connection of the same (single) loop is served
// whole: the put's demotion waits on the tier pool, not on the loop. Released, the put
// completes and block 1 reads back from disk.
TEST_F(DataStreamDiskTest, AGetIsServedWhileAPutOnTheSameLoopWaitsForTheDisk) {
  const TestBlock one = MakeBlock(1, 512 * 1024), two = MakeBlock(2, 64 * 1024),
                  three = MakeBlock(3, 512 * 1024);
  ASSERT_TRUE(store_->Put(one.header, one.payload).ok());
  ASSERT_TRUE(store_->Put(two.header, two.payload).ok());
  std::vector<uint8_t> scratch(two.payload.size());
  ASSERT_TRUE(store_->Get(two.ref(), scratch).ok());  // block 2 used last: block 1 is the victim

  const TransferTicket put_ticket = server_->OpenPut({three.header}).value();
  auto putter = std::async(std::launch::async, [&] {
    const std::vector<std::span<const uint8_t>> payloads{three.payload};
    return Client()->Put(put_ticket, payloads);
  });
  ASSERT_TRUE(kvtier::testing::WaitUntil([&] { return disk_writes_started_.load() > 0; }))
      << "the put never reached the disk";

  const std::vector<BlockKey> keys{two.header.key};
  const StreamGetOpened opened =
      server_->OpenGet(keys, storage::testing::kFormat, kScope, nullptr).value();
  std::vector<uint8_t> got(two.payload.size());
  auto getter = std::async(std::launch::async, [&] {
    const std::vector<std::span<uint8_t>> outs{got};
    return Client()->Get(opened.ticket, outs);
  });
  const bool served = getter.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  EXPECT_EQ(putter.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout)
      << "the put was held";
  ReleaseDisk();
  ASSERT_TRUE(served) << "the get waited for the put's disk write: the loop was blocked";
  const auto states = getter.get();
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ(states->front(), StreamBlockState::kPresent);
  EXPECT_EQ(got, two.payload);

  const auto put = putter.get();
  ASSERT_TRUE(put.ok()) << put.status();
  std::vector<uint8_t> out(one.payload.size());
  const auto hit = store_->Get(one.ref(), out);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->tier, kvtier::Tier::kDisk);
  EXPECT_EQ(out, one.payload);
}

}  // namespace
}  // namespace kvtier::store
