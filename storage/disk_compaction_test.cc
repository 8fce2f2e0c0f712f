// The disk tier's compaction: moving the live blocks out of sparse segments (see
// storage/disk_tier_compaction.cc), while gets go on, and dropping what it finds corrupt.
#include <gtest/gtest.h>

#include <algorithm>

#include "storage/disk_tier.h"
#include "storage/testing/blocks.h"
#include "storage/testing/disk.h"
#include "tests/testing/test_util.h"

namespace kvtier::storage {
namespace {

using kvtier::testing::TempDir;
using testing::CheckingReaders;
using testing::CorruptPayload;
using testing::MakeBlock;
using testing::OpenDiskTier;
using testing::ReadBack;
using testing::TestBlock;

DiskTierOptions SmallTier(const std::string& path) {
  DiskTierOptions options;
  options.path = path;
  options.capacity_bytes = 2 << 20;  // 32 blocks of 64 KiB
  options.segment_bytes = 1 << 20;   // 16 of them per segment
  options.memtable_bytes = 1 << 20;
  return options;
}

// Blocks of 64 KiB in segments of 1 MiB, in a tier of 2 MiB: the oldest blocks are
// evicted as new ones arrive, but every 8th block is read again and again (kept hot), so
// old segments keep a few live blocks each. Compaction moves those out: the files stay
// within the live bytes plus about a segment, and every block still stored reads back
// intact, before and after a restart.
TEST(DiskCompactionTest, CompactionKeepsTheFilesNearTheLiveBytes) {
  TempDir dir;
  const DiskTierOptions options = SmallTier(dir.path());
  auto tier = DiskTier::Create(options);
  ASSERT_TRUE(tier.ok()) << tier.status();
  std::vector<TestBlock> hot;
  uint64_t max_file_bytes = 0;
  for (uint64_t id = 1; id <= 400; ++id) {
    TestBlock block = MakeBlock(id, 64 << 10);
    ASSERT_TRUE((*tier)->Put(block.header, block.payload).ok());
    if (id % 8 == 0) hot.push_back(std::move(block));
    for (const TestBlock& h : hot)
      (*tier)->Contains(h.ref()) && ReadBack(**tier, h).ok();  // keep them recent
    max_file_bytes = std::max(max_file_bytes, (*tier)->Files().file_bytes);
  }
  const DiskFiles files = (*tier)->Files();
  // At most 1.25x the live bytes plus a segment, and the put that found the debt may have
  // added up to a segment's worth before its compaction.
  EXPECT_LE(max_file_bytes, options.capacity_bytes * 5 / 4 + 2 * options.segment_bytes)
      << "compaction kept up";
  EXPECT_LE(files.file_bytes, files.live_bytes * 5 / 4 + 2 * options.segment_bytes);
  EXPECT_EQ(files.live_bytes, (*tier)->Stats().bytes);
  EXPECT_EQ(files.file_bytes, (*tier)->Stats().medium_bytes);
  size_t hot_stored = 0;
  for (const TestBlock& h : hot) {
    if (!(*tier)->Contains(h.ref())) continue;
    ++hot_stored;
    auto read = ReadBack(**tier, h);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(*read, h.payload);
  }
  EXPECT_GT(hot_stored, 10u) << "the hot blocks outlived their segments";
  tier->reset();
  auto reopened = OpenDiskTier(dir.path(), options.capacity_bytes);
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->Stats().bytes, files.live_bytes);
  for (const TestBlock& h : hot) {
    if (!reopened->Contains(h.ref())) continue;
    EXPECT_EQ(*ReadBack(*reopened, h), h.payload);
  }
}

// The same workload while three more readers read the hot blocks again and again: the
// compaction's copies run outside the index lock, and every get that succeeds returns
// exactly its block's bytes (from the old copy or the new one).
TEST(DiskCompactionTest, GetsReadTheRightBytesWhileCompactionMovesTheirBlocks) {
  TempDir dir;
  const DiskTierOptions options = SmallTier(dir.path());
  auto tier = DiskTier::Create(options);
  ASSERT_TRUE(tier.ok()) << tier.status();
  std::vector<TestBlock> blocks;
  for (uint64_t id = 1; id <= 400; ++id) blocks.push_back(MakeBlock(id, 64 << 10));
  CheckingReaders readers(**tier, 3, [&](uint64_t r, uint64_t i) -> const TestBlock& {
    return blocks[((r + i) * 8 + 7) % blocks.size()];  // ids 8, 16, ...: the hot ones
  });
  uint64_t max_file_bytes = 0;
  for (const TestBlock& block : blocks) {
    ASSERT_TRUE((*tier)->Put(block.header, block.payload).ok());
    // The writer keeps the hot blocks recent too, so that they outlive their segments
    // however the readers are scheduled.
    for (uint64_t id = 8; id <= block.header.key.lo; id += 8)
      (void)ReadBack(**tier, blocks[id - 1]);
    max_file_bytes = std::max(max_file_bytes, (*tier)->Files().file_bytes);
  }
  readers.Stop();
  EXPECT_EQ(readers.wrong.load(), 0u) << "a get returned another block's bytes";
  EXPECT_EQ(readers.errors.load(), 0u);
  EXPECT_GT(readers.hits.load(), 0u);
  EXPECT_EQ((*tier)->Stats().checksum_failures, 0u);
  EXPECT_LE(max_file_bytes, options.capacity_bytes * 5 / 4 + 2 * options.segment_bytes)
      << "compaction kept up";
  size_t hot_stored = 0;  // the last two segments hold 4 of them: the rest were moved
  for (uint64_t id = 8; id <= blocks.size(); id += 8)
    hot_stored += (*tier)->Contains(blocks[id - 1].ref());
  EXPECT_GT(hot_stored, 10u) << "compaction moved hot blocks while they were read";
}

// Segment 1 keeps one block of priority 90 (h1, whose payload is corrupted on disk) and
// segment 2 two (h2a, h2b); their other blocks (priority 35) are evicted as new ones
// arrive. Once the dead bytes pass a segment's worth, compaction moves the sparser
// segment 1: h1 fails its checksum on the way and is dropped (counted), never moved;
// h2a and h2b read back intact.
TEST(DiskCompactionTest, ABlockFoundCorruptWhileMovedIsDroppedCountedAndTold) {
  TempDir dir;
  std::vector<uint64_t> removed;
  DiskTierOptions options = SmallTier(dir.path());
  options.on_removed = [&](const BlockHeader& header) { removed.push_back(header.key.lo); };
  auto tier = DiskTier::Create(options);
  ASSERT_TRUE(tier.ok()) << tier.status();
  const TestBlock h1 = MakeBlock(1001, 64 << 10, 90), h2a = MakeBlock(1002, 64 << 10, 90),
                  h2b = MakeBlock(1003, 64 << 10, 90);
  uint64_t next_id = 1;
  auto put_low = [&](int count) {
    for (int i = 0; i < count; ++i) {
      const TestBlock block = MakeBlock(next_id++, 64 << 10);
      ASSERT_TRUE((*tier)->Put(block.header, block.payload).ok());
    }
  };
  ASSERT_TRUE((*tier)->Put(h1.header, h1.payload).ok());
  put_low(15);  // segment 1 full
  ASSERT_TRUE((*tier)->Put(h2a.header, h2a.payload).ok());
  ASSERT_TRUE((*tier)->Put(h2b.header, h2b.payload).ok());
  put_low(14);  // segment 2 full
  ASSERT_TRUE(CorruptPayload(dir.path(), h1.payload));
  put_low(40);  // evicts the low blocks of segments 1 and 2, and more
  EXPECT_EQ((*tier)->Stats().checksum_failures, 1u);
  EXPECT_FALSE((*tier)->Contains(h1.ref())) << "dropped, not moved";
  EXPECT_EQ(removed, std::vector<uint64_t>{1001}) << "and told as a removal (evictions are not)";
  for (const TestBlock* h : {&h2a, &h2b}) {
    auto read = ReadBack(**tier, *h);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(*read, h->payload);
  }
  const DiskFiles files = (*tier)->Files();
  EXPECT_EQ(files.live_bytes, (*tier)->Stats().bytes)
      << "the dropped block's room is not counted live";
}

}  // namespace
}  // namespace kvtier::storage
