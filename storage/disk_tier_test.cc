#include "storage/disk_tier.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <filesystem>
#include <thread>
#include <vector>

#include "storage/testing/blocks.h"
#include "storage/testing/disk.h"
#include "tests/testing/test_util.h"

namespace kvtier::storage {
namespace {

using kvtier::testing::TempDir;
using std::filesystem::recursive_directory_iterator;
using testing::CheckingReaders;
using testing::CorruptPayload;
using testing::MakeBlock;
using testing::OpenDiskTier;
using testing::ReadBack;
using testing::TestBlock;
using testing::TestDiskOptions;

TEST(DiskTierTest, BlocksSurviveReopen) {
  TempDir dir;
  auto b1 = MakeBlock(1, 5000, 70), b2 = MakeBlock(2, 300);
  b1.header.retention_left_ms = 60'000;
  {
    auto tier = OpenDiskTier(dir.path());
    ASSERT_TRUE(tier->Put(b1.header, b1.payload).ok());
    ASSERT_TRUE(tier->Put(b2.header, b2.payload).ok());
  }  // closed without an explicit flush: the WAL carries both
  auto tier = OpenDiskTier(dir.path());
  EXPECT_EQ(tier->Stats().blocks, 2u);
  EXPECT_EQ(tier->Stats().bytes, 5300u);
  auto read = ReadBack(*tier, b1);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, b1.payload);
  auto header = tier->Peek(b1.ref());
  EXPECT_EQ(header->priority, 70);
  EXPECT_GT(header->retention_left_ms, 0u);
  EXPECT_EQ(*ReadBack(*tier, b2), b2.payload);
  EXPECT_EQ(tier->Headers().size(), 2u);
  EXPECT_EQ(tier->Stats().bytes_read, 5300u) << "both blocks read once since the reopen";
  EXPECT_EQ(tier->Stats().bytes_written, 0u) << "nothing stored since the reopen";
}

TEST(DiskTierTest, CorruptPayloadIsReportedAsDataLossAndNeverReturned) {
  TempDir dir;
  auto good = MakeBlock(1, 8192), bad = MakeBlock(2, 8192);
  {
    auto tier = OpenDiskTier(dir.path());
    ASSERT_TRUE(tier->Put(good.header, good.payload).ok());
    ASSERT_TRUE(tier->Put(bad.header, bad.payload).ok());
    ASSERT_TRUE(tier->Flush().ok());
  }
  ASSERT_TRUE(CorruptPayload(dir.path(), bad.payload));
  std::vector<uint64_t> removed;
  auto tier = OpenDiskTier(dir.path(), 1 << 20, nullptr,
                           [&](const BlockHeader& header) { removed.push_back(header.key.lo); });
  auto read = ReadBack(*tier, bad);
  EXPECT_EQ(read.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find(bad.header.key.ToHex()), std::string::npos);
  EXPECT_EQ(tier->Stats().checksum_failures, 1u);
  EXPECT_EQ(removed, std::vector<uint64_t>{2}) << "the drop is told, as a removal";
  EXPECT_FALSE(tier->Contains(bad.ref()));  // deleted, so the next read is a plain miss
  auto intact = ReadBack(*tier, good);
  ASSERT_TRUE(intact.ok()) << intact.status();
  EXPECT_EQ(*intact, good.payload);
}

// A segment file cut short under the open tier (a failing disk, an operator's mistake):
// the read fails with an error that names the block, nothing is returned, and it is
// counted. After a restart the block is simply gone: its header points past the file.
TEST(DiskTierTest, APayloadLostUnderTheTierIsAnErrorCountedAndNeverReturned) {
  TempDir dir;
  auto block = MakeBlock(1, 8192);
  auto tier = OpenDiskTier(dir.path());
  ASSERT_TRUE(tier->Put(block.header, block.payload).ok());
  ASSERT_TRUE(tier->Flush().ok());
  size_t cut = 0;
  for (const auto& file : recursive_directory_iterator(dir.path())) {
    if (file.path().extension() == ".seg") cut += truncate(file.path().c_str(), 0) == 0 ? 1 : 0;
  }
  ASSERT_EQ(cut, 1u);
  auto read = ReadBack(*tier, block);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find(block.header.key.ToHex()), std::string::npos)
      << read.status();
  EXPECT_EQ(read.status().code(), StatusCode::kUnavailable)
      << read.status();  // an I/O error: may pass
  EXPECT_EQ(tier->Stats().io_errors, 1u);
  EXPECT_EQ(tier->Stats().checksum_failures, 0u);

  tier.reset();
  auto reopened = OpenDiskTier(dir.path());
  ASSERT_NE(reopened, nullptr);
  EXPECT_FALSE(reopened->Contains(block.ref()));
  EXPECT_EQ(reopened->Stats().blocks, 0u);
  EXPECT_EQ(reopened->Files().lost_at_open, 1u);
}

// Reads run while a writer puts and removes blocks (puts write their payloads outside
// the index lock): every get that succeeds returns exactly its block's bytes.
TEST(DiskTierTest, ConcurrentGetsPutsAndRemovesNeverSeeAnotherBlocksBytes) {
  TempDir dir;
  DiskTierOptions options;
  options.path = dir.path();
  options.capacity_bytes = 1 << 20;  // 32 blocks of 32 KiB: puts evict
  options.segment_bytes = 1 << 20;
  auto tier = DiskTier::Create(options);
  ASSERT_TRUE(tier.ok()) << tier.status();
  std::vector<TestBlock> blocks;
  for (uint64_t id = 0; id < 64; ++id) blocks.push_back(MakeBlock(id, 32 << 10));
  CheckingReaders readers(**tier, 3, [&](uint64_t r, uint64_t i) -> const TestBlock& {
    return blocks[((r + i) * 7) % blocks.size()];
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  for (uint64_t n = 0; std::chrono::steady_clock::now() < until; ++n) {
    const TestBlock& block = blocks[n % blocks.size()];
    if (n % 5 == 4) {
      (void)(*tier)->Remove(blocks[(n * 3) % blocks.size()].ref());
      continue;
    }
    const std::vector<PutItem> batch{{block.header, block.payload}};
    ASSERT_TRUE((*tier)->PutBatch(batch).front().ok());
  }
  readers.Stop();
  EXPECT_EQ(readers.wrong.load(), 0u);
  EXPECT_EQ(readers.errors.load(), 0u);
  EXPECT_GT(readers.hits.load(), 50u);
  EXPECT_EQ((*tier)->Files().live_bytes, (*tier)->Stats().bytes)
      << "the segments count what the index holds";
}

// Four threads put 16 batches of 4 blocks each under kFsync, at once: batches that queue
// while another is written go in groups (how many depends on timing; put_group_queue_test
// shows the grouping itself). Every put is acknowledged, every block reads back, and all
// of them survive a reopen.
TEST(DiskTierTest, BatchesPutFromSeveralThreadsAtOnceAreAllAcknowledgedAndSurviveReopen) {
  TempDir dir;
  DiskTierOptions options = TestDiskOptions(dir.path(), 64 << 20);
  options.sync = DiskSync::kFsync;
  constexpr uint64_t kThreads = 4, kBatches = 16, kBlocksPerBatch = 4;
  std::vector<TestBlock> blocks;
  for (uint64_t id = 0; id < kThreads * kBatches * kBlocksPerBatch; ++id)
    blocks.push_back(MakeBlock(id, 16 << 10));
  {
    auto tier = DiskTier::Create(options);
    ASSERT_TRUE(tier.ok()) << tier.status();
    std::atomic<uint64_t> refused{0};
    std::vector<std::thread> putters;
    for (uint64_t t = 0; t < kThreads; ++t) {
      putters.emplace_back([&, t] {
        for (uint64_t b = 0; b < kBatches; ++b) {
          std::vector<PutItem> batch;
          for (uint64_t i = 0; i < kBlocksPerBatch; ++i) {
            const TestBlock& block = blocks[(t * kBatches + b) * kBlocksPerBatch + i];
            batch.push_back({block.header, block.payload});
          }
          for (const Status& result : (*tier)->PutBatch(batch)) refused += result.ok() ? 0 : 1;
        }
      });
    }
    for (std::thread& putter : putters) putter.join();
    EXPECT_EQ(refused.load(), 0u);
    const TierStats stats = (*tier)->Stats();
    EXPECT_EQ(stats.put_batches, kThreads * kBatches);
    EXPECT_GE(stats.put_writes, 1u);
    EXPECT_LE(stats.put_writes, stats.put_batches);
    EXPECT_EQ(stats.blocks, blocks.size());
  }
  auto reopened = DiskTier::Create(options);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  for (const TestBlock& block : blocks) {
    auto read = ReadBack(**reopened, block);
    ASSERT_TRUE(read.ok()) << "block " << block.header.key.lo << ": " << read.status();
    EXPECT_EQ(*read, block.payload) << "block " << block.header.key.lo;
  }
}

// Mounts a tmpfs of `size` (e.g. "4m") on `path` for the life of the object.
class SmallFileSystem {
 public:
  SmallFileSystem(const std::string& path, const std::string& size) : path_(path) {
    mounted_ = mount("tmpfs", path.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
    if (!mounted_) error_ = std::strerror(errno);
  }
  ~SmallFileSystem() {
    if (mounted_) umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string path_;
  bool mounted_ = false;
  std::string error_;
};

// Writes `path` until its file system has no room left.
void FillFileSystem(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << std::strerror(errno);
  const std::vector<char> chunk(4096, 'x');
  while (std::fwrite(chunk.data(), 1, chunk.size(), file) == chunk.size() &&
         std::fflush(file) == 0) {
  }
  std::fclose(file);
}

// A disk tier on a 4 MiB tmpfs with room, by its own capacity, for much more: the file
// system fills first. The write that finds it full (a put's payload or headers, or a
// flush) fails as kResourceExhausted ("disk full": a caller may go elsewhere), the
// failure is counted, and every block whose put was acknowledged reads back intact.
// Needs the right to mount (root in CI).
TEST(DiskTierTest, AFullDiskFailsThePutAndLosesNothingAcknowledged) {
  TempDir dir;
  SmallFileSystem fs(dir.path(), "4m");
  if (!fs.mounted())
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << fs.error() << "); needs root";
  std::vector<TestBlock> acknowledged;
  Status full;
  {
    auto tier = OpenDiskTier(dir.path(), /*capacity=*/1ull << 30);
    ASSERT_NE(tier, nullptr);
    for (uint64_t id = 1; id <= 256 && full.ok(); ++id) {  // 256 x 64 KiB: 4x the file system
      TestBlock block = MakeBlock(id, 64 << 10);
      full = tier->Put(block.header, block.payload);
      if (!full.ok()) break;
      acknowledged.push_back(std::move(block));
      if (id % 8 == 0) full = tier->Flush();
    }
    ASSERT_FALSE(full.ok()) << "256 blocks of 64 KiB fit in 4 MiB?";
    EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full;
    EXPECT_NE(full.message().find("disk full"), std::string::npos) << full;
    EXPECT_GE(tier->Stats().io_errors, 1u);
    ASSERT_GT(acknowledged.size(), 8u);
    for (const TestBlock& block : acknowledged) {
      auto read = ReadBack(*tier, block);
      ASSERT_TRUE(read.ok()) << "block " << block.header.key.lo << ": " << read.status();
      EXPECT_EQ(*read, block.payload);
    }
    // What an operator or the store does next on a full disk: a flush, a remove, more puts
    // and then the shutdown. Each answers a Status (RocksDB's debug build asserts when a
    // writer that failed is used again: none may be), and none loses what was acknowledged.
    const Status flushed = tier->Flush();
    EXPECT_TRUE(flushed.ok() || flushed.code() == StatusCode::kResourceExhausted) << flushed;
    const TestBlock& removed = acknowledged.back();
    const Status gone = tier->Remove(removed.ref());
    EXPECT_TRUE(gone.ok() || gone.code() == StatusCode::kResourceExhausted) << gone;
    if (gone.ok()) acknowledged.pop_back();
    const TestBlock more = MakeBlock(1000, 64 << 10);
    const Status again = tier->Put(more.header, more.payload);
    EXPECT_TRUE(again.ok() || again.code() == StatusCode::kResourceExhausted) << again;
    if (again.ok()) acknowledged.push_back(more);
    for (const TestBlock& block : acknowledged) {
      auto read = ReadBack(*tier, block);
      ASSERT_TRUE(read.ok()) << "after the full disk's flush and remove, block "
                             << block.header.key.lo << ": " << read.status();
    }
  }
  // A restart on the still-full file system either opens (the headers fit) or fails to
  // open, saying why; once the operator makes room (the tmpfs grows), the reopened tier
  // holds every acknowledged block.
  auto on_full_disk = DiskTier::Create(TestDiskOptions(dir.path(), 1ull << 30));
  if (!on_full_disk.ok()) {
    EXPECT_EQ(on_full_disk.status().code(), StatusCode::kResourceExhausted)
        << on_full_disk.status();
    ASSERT_EQ(mount("tmpfs", dir.path().c_str(), "tmpfs", MS_REMOUNT, "size=64m"), 0)
        << std::strerror(errno);
  } else {
    on_full_disk->reset();  // closed for the reopen below
  }
  auto reopened = OpenDiskTier(dir.path(), /*capacity=*/1ull << 30);
  ASSERT_NE(reopened, nullptr);
  for (const TestBlock& block : acknowledged) {
    auto read = ReadBack(*reopened, block);
    ASSERT_TRUE(read.ok()) << "after reopen, block " << block.header.key.lo << ": "
                           << read.status();
    EXPECT_EQ(*read, block.payload);
  }
  EXPECT_EQ(reopened->Files().lost_at_open, 0u) << "no header outlived its payload";
}

// Three 64 KiB blocks fill the tier: 1 and 2 (p10, 1 the older), 3 (p40). Block 4 needs
// room, so its put takes block 1 out; then its payload write finds the file system full.
// The failed put evicts nothing: blocks 1-3 read back, nothing is reported evicted, and
// once there is room again the same put evicts block 1, and the next one block 2, as
// they would have before the failure.
TEST(DiskTierTest, APutThatFailsToWriteEvictsNothing) {
  TempDir dir;
  SmallFileSystem fs(dir.path(), "4m");
  if (!fs.mounted())
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << fs.error() << "); needs root";
  constexpr size_t kBytes = 64 << 10;
  std::vector<uint64_t> evicted;
  auto tier = OpenDiskTier(dir.path(), 3 * kBytes, [&](const BlockHeader& header, auto) {
    evicted.push_back(header.key.lo);
  });
  ASSERT_NE(tier, nullptr);
  std::vector<TestBlock> kept;
  for (auto [id, priority] : {std::pair{1, 10}, {2, 10}, {3, 40}}) {
    kept.push_back(MakeBlock(id, kBytes, static_cast<uint8_t>(priority)));
    ASSERT_TRUE(tier->Put(kept.back().header, kept.back().payload).ok());
  }
  ASSERT_TRUE(tier->Flush().ok());
  const std::string filler = dir.path() + "/filler";
  FillFileSystem(filler);

  const TestBlock fourth = MakeBlock(4, kBytes), fifth = MakeBlock(5, kBytes);
  const Status failed = tier->Put(fourth.header, fourth.payload);
  ASSERT_FALSE(failed.ok()) << "a 64 KiB payload written to a full file system?";
  EXPECT_EQ(failed.code(), StatusCode::kResourceExhausted) << failed;
  EXPECT_TRUE(evicted.empty()) << "block " << evicted.front()
                               << " reported evicted by a put that failed";
  EXPECT_EQ(tier->Stats().evictions, 0u);
  EXPECT_EQ(tier->Stats().bytes, 3 * kBytes);
  EXPECT_FALSE(tier->Contains(fourth.ref()));
  for (const TestBlock& block : kept) {
    auto read = ReadBack(*tier, block);
    ASSERT_TRUE(read.ok()) << "block " << block.header.key.lo << ": " << read.status();
    EXPECT_EQ(*read, block.payload);
  }

  std::filesystem::remove(filler);
  ASSERT_TRUE(tier->Put(fourth.header, fourth.payload).ok());
  ASSERT_TRUE(tier->Put(fifth.header, fifth.payload).ok());
  EXPECT_EQ(evicted, (std::vector<uint64_t>{1, 2}))
      << "the eviction order is as before the failure";
  EXPECT_EQ(tier->Stats().evictions_by_priority[10], 2u);
}

TEST(DiskTierTest, CapacityEvictsByPriorityAndTellsEvictionsAndRemovalsApart) {
  TempDir dir;
  std::vector<uint64_t> evicted, removed;
  auto tier = OpenDiskTier(
      dir.path(), 3000,
      [&](const BlockHeader& header, auto payload) {
        EXPECT_TRUE(payload.empty());
        evicted.push_back(header.key.lo);
      },
      [&](const BlockHeader& header) { removed.push_back(header.key.lo); });
  // 0 (p80), 1 (p10), 2 (p40) of 1000 bytes fill the tier; block 3 pushes out block 1.
  for (auto [id, priority] : {std::pair{0, 80}, {1, 10}, {2, 40}, {3, 35}}) {
    auto block = MakeBlock(id, 1000, static_cast<uint8_t>(priority));
    ASSERT_TRUE(tier->Put(block.header, block.payload).ok());
  }
  EXPECT_EQ(evicted, std::vector<uint64_t>{1});
  EXPECT_EQ(tier->Stats().bytes, 3000u);
  EXPECT_EQ(tier->Stats().evictions_by_priority[10], 1u);
  EXPECT_FALSE(tier->Contains(MakeBlock(1, 1000).ref()));
  EXPECT_TRUE(removed.empty()) << "an eviction is not a removal";
  // Block 2 removed: told as a removal; a second Remove finds nothing and tells nothing.
  ASSERT_TRUE(tier->Remove(MakeBlock(2, 1000).ref()).ok());
  EXPECT_EQ(tier->Remove(MakeBlock(2, 1000).ref()).code(), StatusCode::kNotFound);
  EXPECT_EQ(removed, std::vector<uint64_t>{2});
  EXPECT_EQ(evicted, std::vector<uint64_t>{1});
}

TEST(DiskTierTest, DisplacedByNamesWhatAPutWouldEvictAndEvictsNothing) {
  TempDir dir;
  auto tier = OpenDiskTier(dir.path(), 3000);
  for (auto [id, priority] : {std::pair{0, 80}, {1, 10}, {2, 40}}) {
    auto block = MakeBlock(id, 1000, static_cast<uint8_t>(priority));
    ASSERT_TRUE(tier->Put(block.header, block.payload).ok());
  }
  auto keys = [](const std::vector<DisplacedBlock>& displaced) {
    std::vector<std::pair<uint64_t, int>> out;
    for (const DisplacedBlock& block : displaced) out.emplace_back(block.key.lo, block.priority);
    return out;
  };
  using Displaced = std::vector<std::pair<uint64_t, int>>;
  const BlockHeader three = MakeBlock(3, 1000).header;
  EXPECT_EQ(keys(tier->DisplacedBy(three, 0)), (Displaced{{1, 10}}));
  // 1000 bytes of the same batch go first and take block 1: block 3 would take block 2.
  EXPECT_EQ(keys(tier->DisplacedBy(three, 1000)), (Displaced{{2, 40}}));
  EXPECT_EQ(keys(tier->DisplacedBy(MakeBlock(3, 1500).header, 0)), (Displaced{{1, 10}, {2, 40}}));
  EXPECT_TRUE(tier->DisplacedBy(MakeBlock(0, 1000).header, 0).empty()) << "stored already";
  EXPECT_EQ(tier->Stats().blocks, 3u);
  ASSERT_TRUE(tier->Remove(MakeBlock(2, 1000).ref()).ok());
  EXPECT_TRUE(tier->DisplacedBy(three, 0).empty()) << "it fits";
}

TEST(DiskTierTest, BatchesStoreEverythingValidAndRefuseTheRest) {
  TempDir dir;
  auto tier = OpenDiskTier(dir.path());
  auto ok1 = MakeBlock(1, 100),
       ok2 = MakeBlock(2, 200, 35, 7, "other-model|L1/H1/D8/T16/fp16/W0/S0|int8");
  auto broken = MakeBlock(3, 100);
  broken.payload[0] ^= 1;
  std::vector<PutItem> items{
      {ok1.header, ok1.payload}, {broken.header, broken.payload}, {ok2.header, ok2.payload}};
  auto results = tier->PutBatch(items);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[0].ok());
  EXPECT_EQ(results[1].code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(results[2].ok());
  EXPECT_EQ(tier->Stats().blocks, 2u);
  EXPECT_FALSE(tier->Contains(broken.ref()));
  EXPECT_EQ(*ReadBack(*tier, ok2),
            ok2.payload);  // a second format: its own headers, the same segments
  // Items whose caller hashed them skip that pass, not the size check; a payload that
  // was wrong all the same is caught when read (kDataLoss), never served.
  auto checked = MakeBlock(4, 100), short_one = MakeBlock(5, 100);
  results = tier->PutBatch(
      std::vector<PutItem>{{checked.header, checked.payload, true},
                           {broken.header, broken.payload, true},
                           {short_one.header, std::span(short_one.payload).first(99), true}});
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
  EXPECT_NE(results[2].message().find("truncated"), std::string::npos) << results[2];
  EXPECT_EQ(*ReadBack(*tier, checked), checked.payload);
  EXPECT_EQ(ReadBack(*tier, broken).status().code(), StatusCode::kDataLoss);
}

TEST(DiskTierTest, SaltScopesAreIsolated) {
  TempDir dir;
  auto tier = OpenDiskTier(dir.path());
  auto block = MakeBlock(1, 100, 35, /*salt_scope=*/11);
  ASSERT_TRUE(tier->Put(block.header, block.payload).ok());
  BlockRef foreign = block.ref();
  foreign.salt_scope = 12;
  std::vector<uint8_t> out(100);
  EXPECT_EQ(tier->Get(foreign, out).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(tier->Remove(foreign).code(), StatusCode::kNotFound);
  auto other = block;
  other.header.salt_scope = 12;  // the same key written by another tenant
  EXPECT_EQ(tier->Put(other.header, other.payload).code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(tier->Remove(block.ref()).ok());
  EXPECT_EQ(tier->Stats().blocks, 0u);
}

TEST(DiskTierTest, UnusableDirectoriesGetClearErrors) {
  TempDir dir;
  ASSERT_TRUE(kvtier::testing::WriteFile(dir.File("plain-file"), "x"));
  DiskTierOptions options;
  options.capacity_bytes = 1 << 20;
  options.path = dir.File("plain-file") + "/db";
  auto not_a_dir = DiskTier::Create(options);
  ASSERT_FALSE(not_a_dir.ok());
  EXPECT_NE(not_a_dir.status().message().find(options.path), std::string::npos);

  if (geteuid() != 0) {  // root ignores directory permissions
    std::filesystem::create_directory(dir.File("locked"));
    std::filesystem::permissions(dir.File("locked"), std::filesystem::perms::owner_read |
                                                         std::filesystem::perms::owner_exec);
    options.path = dir.File("locked") + "/db";
    EXPECT_EQ(DiskTier::Create(options).status().code(), StatusCode::kPermissionDenied);
    std::filesystem::permissions(dir.File("locked"), std::filesystem::perms::owner_all);
  }
  options.capacity_bytes = 0;
  EXPECT_NE(DiskTier::Create(options).status().message().find("capacity is zero"),
            std::string::npos);
}

}  // namespace
}  // namespace kvtier::storage
