// kill -9 while writing: every block the disk tier acknowledged reads back identical
// after a restart, no block is ever served with wrong or partial bytes, and no block
// whose removal was acknowledged comes back. 20 cycles of puts, 10 of puts with removals
// and 10 of puts from 4 threads at once (written in groups) (KVTIER_CRASH_CYCLES=N for a
// longer soak of each), each killing the writer at a random moment after its first
// acknowledgements.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "storage/disk_tier.h"
#include "storage/testing/blocks.h"
#include "tests/testing/test_util.h"

namespace kvtier::storage {
namespace {

using namespace std::chrono_literals;
using testing::MakeBlock;

constexpr uint64_t kBlockBytes = 16 * 1024;
constexpr uint64_t kBatch = 4;

// The ids after `word` ("ack", "removed") in a writer's output.
std::vector<uint64_t> IdsAfter(const std::string& stdout_text, const std::string& word) {
  std::vector<uint64_t> ids;
  std::istringstream lines(stdout_text);
  std::string token;
  uint64_t id = 0;
  while (lines >> token) {
    if (token == word && lines >> id) ids.push_back(id);
  }
  return ids;
}

// How the killed writer writes: one thread; one removing most of what it wrote, so that
// puts compact; or 4 threads at once, so that their batches are written in groups.
enum class Writer { kPuts, kChurn, kThreads };

// `cycles` times: a writer is killed at a random moment after its first
// acknowledgements; the tier is reopened and checked.
void RunKillCycles(int cycles, Writer how) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.File("db");
  std::mt19937 rng(20261122);
  std::set<uint64_t> live;     // acknowledged, and no removal begun
  std::set<uint64_t> removed;  // acknowledged removed: must never come back
  uint64_t next_id = 0;
  for (int cycle = 0; cycle < cycles; ++cycle) {
    std::vector<uint64_t> acked;  // this cycle's
    {
      // Each cycle's output files in a fresh directory: never the previous writer's "ack".
      const std::string output_dir = dir.File("cycle" + std::to_string(cycle));
      std::filesystem::create_directory(output_dir);
      std::vector<std::string> argv{std::string(KVTIER_BIN_DIR) + "/storage_crash_writer", db,
                                    std::to_string(next_id), std::to_string(kBlockBytes),
                                    std::to_string(kBatch)};
      if (how == Writer::kChurn) argv.push_back("churn");
      if (how == Writer::kThreads) argv.push_back("threads=4");
      kvtier::testing::ChildProcess writer(argv, output_dir);
      ASSERT_TRUE(writer.WaitForOutput("ack", 20s)) << "cycle " << cycle << ": " << writer.Stderr();
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 100));
      writer.Signal(SIGKILL);
      EXPECT_EQ(writer.Wait(10s), -SIGKILL) << writer.Stderr();
      acked = IdsAfter(writer.Stdout(), "ack");
      ASSERT_FALSE(acked.empty());
      live.insert(acked.begin(), acked.end());
      for (uint64_t id : IdsAfter(writer.Stdout(), "removing")) live.erase(id);  // present or not
      for (uint64_t id : IdsAfter(writer.Stdout(), "removed")) removed.insert(id);
      std::sort(acked.begin(), acked.end());  // the threads' acknowledgements interleave
      next_id = acked.back() + 1000;  // past anything the killed writer may have half-written
      next_id -= next_id % kBatch;    // the churn removes by batch
    }
    DiskTierOptions options;
    options.path = db;
    options.capacity_bytes = 1ull << 40;
    auto tier = DiskTier::Create(options);
    ASSERT_TRUE(tier.ok()) << "cycle " << cycle << ": " << tier.status();
    // Every live block is there; this cycle's with their exact bytes (earlier ones were
    // read back in their own cycle, and all are read again at the end).
    std::vector<uint8_t> out(kBlockBytes);
    for (uint64_t id : live) {
      ASSERT_TRUE((*tier)->Contains(MakeBlock(id, 1).ref()))
          << "cycle " << cycle << " lost block " << id;
    }
    const bool last = cycle == cycles - 1;
    for (uint64_t id : live) {
      if (!last && id < acked.front()) continue;
      const auto expected = MakeBlock(id, kBlockBytes);
      auto header = (*tier)->Get(expected.ref(), out);
      ASSERT_TRUE(header.ok()) << "cycle " << cycle << " block " << id << ": " << header.status();
      ASSERT_EQ(out, expected.payload) << "cycle " << cycle << " block " << id;
    }
    // Blocks written but not acknowledged, or removed without the acknowledgement, may or
    // may not be there; if there, they are whole. An acknowledged removal stays removed.
    for (const BlockHeader& header : (*tier)->Headers()) {
      ASSERT_EQ(removed.count(header.key.lo), 0u)
          << "cycle " << cycle << ": removed block " << header.key.lo << " came back";
      if (!last && header.key.lo < acked.front()) continue;  // checked in an earlier cycle
      const auto expected = MakeBlock(header.key.lo, kBlockBytes);
      auto read = (*tier)->Get(expected.ref(), out);
      ASSERT_TRUE(read.ok()) << "block " << header.key.lo << ": " << read.status();
      ASSERT_EQ(out, expected.payload) << "block " << header.key.lo;
    }
    EXPECT_EQ((*tier)->Stats().checksum_failures, 0u);
    EXPECT_EQ((*tier)->Files().lost_at_open, 0u)
        << "cycle " << cycle << ": a header outlived its payload";
  }
  EXPECT_GE(live.size(), static_cast<size_t>(cycles));
}

int Cycles(int default_cycles) {
  const char* env = std::getenv("KVTIER_CRASH_CYCLES");
  return env != nullptr ? std::max(1, std::atoi(env)) : default_cycles;
}

TEST(DiskTierCrashTest, AcknowledgedBlocksSurviveKillNine) {
  RunKillCycles(Cycles(20), Writer::kPuts);
}

// The same with three quarters of every batch removed after it: dead bytes pile up and
// the puts compact (move live blocks and delete segments) when the kill comes.
TEST(DiskTierCrashTest, AcknowledgedBlocksSurviveKillNineWhileCompacting) {
  RunKillCycles(Cycles(10), Writer::kChurn);
}

// Four threads putting at once: the kill comes while groups of their batches are written
// (one payload write and one header batch for several callers).
TEST(DiskTierCrashTest, AcknowledgedBlocksSurviveKillNineWhilePutsGoInGroups) {
  RunKillCycles(Cycles(10), Writer::kThreads);
}

}  // namespace
}  // namespace kvtier::storage
