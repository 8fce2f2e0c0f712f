#include "services/store/store_tiers.h"

#include <gtest/gtest.h>

namespace kvtier::store {
namespace {

// store.host_free_percent becomes the room a node's store keeps free in its host tier,
// only where there is a disk tier to move blocks down to.
TEST(StoreTiersTest, TheHostTiersRoomAheadIsAShareOfItWhereThereIsADisk) {
  KvtierConfig config;
  config.data_dir = "/tmp/unused";
  config.store.host_cache_bytes = 1000 << 20;
  config.store.disk_bytes = 4ull << 30;
  config.store.host_free_percent = 10;
  auto options = TieredStoreOptionsFrom(config, /*page_bytes=*/0);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->free_ahead_bytes, 100ull << 20);

  config.store.host_free_percent = 0;
  EXPECT_EQ(TieredStoreOptionsFrom(config, 0)->free_ahead_bytes, 0u);

  config.store.host_free_percent = 10;
  config.store.disk_bytes = 0;  // nowhere to move blocks down to
  EXPECT_EQ(TieredStoreOptionsFrom(config, 0)->free_ahead_bytes, 0u);
}

}  // namespace
}  // namespace kvtier::store
