// kill -9 of a running `kvtier store` while clients write to it over the network, one
// through Cap'n Proto puts and one through openPut and the data stream; then the store is
// restarted on the same data directory and read back, in a loop:
//   - disk tier only (20 cycles; KVTIER_STORE_CRASH_CYCLES=N for a longer soak): every
//     block whose put was acknowledged reads back byte for byte;
//   - a host tier in front (5 cycles): acknowledged blocks still in host memory at the
//     kill are gone (the host tier is memory), at most the host tier's capacity of them;
// and in both, a block whose put was cut off by the kill is absent or whole, and no block
// is ever served with wrong bytes or reported corrupt.
// (storage/disk_tier_crash_test does the same to the disk tier alone, with removals.)
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "services/store/rpc/testing/block_store_client.h"
#include "services/store/rpc/testing/store_process.h"
#include "storage/testing/blocks.h"
#include "tests/testing/test_util.h"

namespace kvtier::store {
namespace {

using namespace std::chrono_literals;
using storage::testing::MakeBlock;
using storage::testing::TestBlock;
using testing::BlockStoreClient;

constexpr uint64_t kBlockBytes = 16 * 1024;
constexpr uint64_t kBatch = 4;
constexpr uint64_t kBlocksPerWriter = 512;  // at most, per cycle: the kill usually comes first
constexpr char kToken[] = "crash-test";     // auth is off: any token opens the session

int CyclesOr(int fallback) {
  const char* cycles = std::getenv("KVTIER_STORE_CRASH_CYCLES");
  return cycles != nullptr ? std::max(1, std::atoi(cycles)) : fallback;
}

// `kvtier store` on `data_dir`, with a host tier of `host_bytes` in front of its disk tier.
class StoreProcess : public testing::StoreProcess {
 public:
  StoreProcess(const std::string& data_dir, uint64_t host_bytes, const std::string& output_dir)
      : testing::StoreProcess(
            {"--data-dir", data_dir, "--store-host-cache-bytes", std::to_string(host_bytes),
             "--store-disk-bytes", std::to_string(1ull << 30)},
            output_dir) {}
};

// One client writing batches of blocks first_id, first_id + 1, ... until the store dies.
struct Writer {
  bool stream = false;
  uint64_t first_id = 0;
  std::vector<uint64_t> acked;    // puts that returned success
  std::vector<uint64_t> cut_off;  // the batch in flight when the store died
  std::string stopped_by;         // the error that ended it; empty if it wrote every block
  std::string broken;             // a put that succeeded but stored fewer blocks
  std::atomic<bool> has_acked{false};
  std::atomic<bool> done{false};
};

void Write(const std::string& address, Writer& w) {
  try {
    BlockStoreClient client(address, kToken);
    for (uint64_t n = 0; n < kBlocksPerWriter; n += kBatch) {
      std::vector<TestBlock> blocks;
      std::vector<uint64_t> ids;
      for (uint64_t i = 0; i < kBatch; ++i) {
        ids.push_back(w.first_id + n + i);
        blocks.push_back(MakeBlock(ids.back(), kBlockBytes));
      }
      const Result<uint32_t> stored = w.stream ? client.StreamPut(blocks) : client.Put(blocks);
      if (!stored.ok()) {
        w.cut_off = ids;
        w.stopped_by = stored.status().ToString();
        break;
      }
      if (*stored != kBatch)
        w.broken = "stored " + std::to_string(*stored) + " of " + std::to_string(kBatch);
      w.acked.insert(w.acked.end(), ids.begin(), ids.end());
      w.has_acked = true;
    }
  } catch (const kj::Exception& e) {  // the connection itself failed
    w.stopped_by = e.getDescription().cStr();
  }
  w.done = true;
}

// What a restarted store answers for `ids`: present (each checked byte for byte against
// its put), missing, or anything else (corrupt, a failed call): `wrong`.
struct ReadBack {
  size_t present = 0;
  std::vector<uint64_t> missing;
  std::vector<std::string> wrong;
};

void Read(BlockStoreClient& client, const std::vector<uint64_t>& ids, bool stream, ReadBack& out) {
  for (size_t at = 0; at < ids.size(); at += 8) {
    const std::vector<uint64_t> chunk(ids.begin() + at, ids.begin() + std::min(ids.size(), at + 8));
    auto answer = stream ? client.StreamGet(chunk, storage::testing::kFormat)
                         : client.Get(chunk, storage::testing::kFormat);
    if (!answer.ok()) {
      out.wrong.push_back("get failed: " + answer.status().ToString());
      continue;
    }
    for (size_t i = 0; i < chunk.size(); ++i) {
      const auto& [state, bytes] = (*answer)[i];
      if (state == "missing") {
        out.missing.push_back(chunk[i]);
      } else if (state == "present" && bytes == MakeBlock(chunk[i], kBlockBytes).payload) {
        ++out.present;
      } else {
        out.wrong.push_back("block " + std::to_string(chunk[i]) + ": " + state +
                            " with other bytes");
      }
    }
  }
}

struct CrashCase {
  const char* name;
  uint64_t host_bytes;  // 0: disk tier only
  int cycles;
  friend void PrintTo(const CrashCase& c, std::ostream* os) { *os << c.name; }
};

class StoreCrashTest : public ::testing::TestWithParam<CrashCase> {};

TEST_P(StoreCrashTest, AcknowledgedBlocksSurviveKillNineAndNothingPartialIsServed) {
  const CrashCase& c = GetParam();
  const int cycles = CyclesOr(c.cycles);
  // The most acknowledged blocks a kill may take: those in host memory.
  const uint64_t may_lose = c.host_bytes / kBlockBytes;
  ::kvtier::testing::TempDir dir;
  const std::string data_dir = dir.File("data");
  std::mt19937 rng(20261124);
  std::vector<uint64_t> surviving;  // acknowledged in earlier cycles and read back after their kill
  std::filesystem::create_directory(dir.File("out0"));
  auto store = std::make_unique<StoreProcess>(data_dir, c.host_bytes, dir.File("out0"));
  std::string address = store->WaitForAddress();
  ASSERT_FALSE(address.empty()) << store->process().Stderr();
  for (int cycle = 0; cycle < cycles; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    // Two clients write (one inline, one on the data stream) until a kill -9 at a random
    // moment after both have had puts acknowledged.
    Writer writers[2];
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) {
      writers[w].stream = w == 1;
      writers[w].first_id = (uint64_t(cycle) * 2 + w) * 100'000;
      threads.emplace_back(Write, address, std::ref(writers[w]));
    }
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline &&
           !std::all_of(std::begin(writers), std::end(writers),
                        [](const Writer& w) { return w.has_acked || w.done; })) {
      std::this_thread::sleep_for(1ms);
    }
    std::this_thread::sleep_for(
        std::chrono::microseconds(std::uniform_int_distribution<int>(0, 40'000)(rng)));
    store->process().Signal(SIGKILL);
    EXPECT_EQ(store->process().Wait(10s), -SIGKILL);
    for (std::thread& t : threads) t.join();
    for (const Writer& w : writers) {
      ASSERT_TRUE(w.broken.empty()) << w.broken;
      ASSERT_FALSE(w.acked.empty()) << "no put acknowledged before the kill: " << w.stopped_by;
      EXPECT_TRUE(!w.stopped_by.empty() || w.acked.size() == kBlocksPerWriter);
    }

    // The store restarted on the same directory.
    const std::string out = dir.File("out" + std::to_string(cycle + 1));
    std::filesystem::create_directory(out);
    store = std::make_unique<StoreProcess>(data_dir, c.host_bytes, out);
    address = store->WaitForAddress();
    ASSERT_FALSE(address.empty()) << store->process().Stderr();
    BlockStoreClient reader(address, kToken);
    ReadBack acked, cut_off, earlier;
    for (const Writer& w : writers) {
      Read(reader, w.acked, w.stream, acked);  // each read back the way it was written
      Read(reader, w.cut_off, !w.stream, cut_off);
    }
    std::vector<uint64_t> sample;
    std::sample(surviving.begin(), surviving.end(), std::back_inserter(sample), 64, rng);
    Read(reader, sample, cycle % 2 == 0, earlier);
    EXPECT_TRUE(acked.wrong.empty() && cut_off.wrong.empty() && earlier.wrong.empty())
        << ::testing::PrintToString(acked.wrong) << ::testing::PrintToString(cut_off.wrong)
        << ::testing::PrintToString(earlier.wrong);
    EXPECT_LE(acked.missing.size(), may_lose)
        << "acknowledged blocks lost by the kill (" << acked.present << " came back)";
    EXPECT_TRUE(earlier.missing.empty()) << "a block that survived one kill is gone after another";
    for (const Writer& w : writers) {
      for (uint64_t id : w.acked) {
        if (std::find(acked.missing.begin(), acked.missing.end(), id) == acked.missing.end())
          surviving.push_back(id);
      }
    }
  }
  store->process().Signal(SIGTERM);
  EXPECT_EQ(store->process().Wait(30s), 0) << store->process().Stderr();
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreCrashTest,
                         ::testing::Values(CrashCase{"DiskOnly", 0, 20},
                                           CrashCase{"HostInFront", 1 << 20, 5}),
                         [](const ::testing::TestParamInfo<CrashCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace kvtier::store
