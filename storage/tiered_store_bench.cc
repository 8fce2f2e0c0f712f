// TieredStore puts from 1 to 16 threads into its host tier: they share the store's lock
// and tell their events under the host tier's, so their copies (and checks) run in
// parallel. 256 KiB blocks of fresh keys into a 1 GiB host tier (no disk tier: nothing
// demoted), the events counted as a node's stream would take them.
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "storage/testing/blocks.h"
#include "storage/testing/put_bench.h"
#include "storage/tiered_store.h"

namespace kvtier::storage {
namespace {

constexpr size_t kBlockBytes = 256 * 1024;

struct Shared {
  std::unique_ptr<TieredStore> store;
  std::atomic<uint64_t> events{0};
};

Shared& Fixture() {
  static Shared* shared = [] {
    auto* s = new Shared();
    TieredStoreOptions options;
    options.host = HostTierOptions{};
    options.host->capacity_bytes = 1ull << 30;
    options.on_event = [s](const StoreEvent&) {
      s->events.fetch_add(1, std::memory_order_relaxed);
    };
    s->store = TieredStore::Create(std::move(options)).value();
    return s;
  }();
  return *shared;
}

// Arg 1: as the data stream puts (one-block batches it has hashed already).
void BM_TieredStorePut(benchmark::State& state) {
  Shared& shared = Fixture();
  testing::PutFreshBlocks(state, kBlockBytes, state.range(0) != 0, [&](const PutItem& item) {
    return std::move(shared.store->PutBatch({&item, 1}).front());
  });
}
BENCHMARK(BM_TieredStorePut)->ArgName("checked")->Arg(0)->Arg(1)->ThreadRange(1, 16)->UseRealTime();

// Gets of blocks held in the host tier (from 1 and 2 threads) while threads of the
// bench's own (Arg: how many, 0 to 2) keep putting fresh blocks into the full tier, each
// put demoting the least recently used block to the disk tier. The hot blocks sit at
// priority 80, so every demotion takes a fresh block. Compare the gets' rate and their
// slowest call (get_max_us) with and without the demotions beside them; put_bytes_per_s
// is the putters' rate meanwhile.
struct DemotingStore {
  std::unique_ptr<TieredStore> store;
  std::vector<testing::TestBlock> hot;
  std::string dir;
};

DemotingStore& DemotingFixture() {
  static DemotingStore* shared = [] {
    auto* s = new DemotingStore();
    s->dir = std::filesystem::temp_directory_path() /
             ("kvtier-demote-bench-" + std::to_string(::getpid()));
    TieredStoreOptions options;
    options.host = HostTierOptions{};
    options.host->capacity_bytes = 64ull << 20;
    options.disk = DiskTierOptions{};
    options.disk->path = s->dir;
    options.disk->capacity_bytes = 1ull << 30;
    s->store = TieredStore::Create(std::move(options)).value();
    for (uint64_t id = 1; id <= 64; ++id) {
      s->hot.push_back(testing::MakeBlock(id, kBlockBytes, /*priority=*/80));
      if (!s->store->Put(s->hot.back().header, s->hot.back().payload).ok()) std::abort();
    }
    std::atexit([] { std::filesystem::remove_all(DemotingFixture().dir); });
    return s;
  }();
  return *shared;
}

// Puts fresh blocks into `store` until `stop`; the bytes put.
uint64_t PutUntil(TieredStore& store, const std::atomic<bool>& stop) {
  static std::atomic<uint64_t> next_id{1'000'000};
  testing::TestBlock block = testing::MakeBlock(next_id.load(), kBlockBytes);
  uint64_t bytes = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    block.header.key.lo = next_id.fetch_add(1);
    const PutItem item{block.header, block.payload, /*checksum_checked=*/true};
    const Status put = std::move(store.PutBatch({&item, 1}).front());
    if (put.code() == StatusCode::kResourceExhausted)
      continue;  // every victim is another putter's: retry
    if (!put.ok()) std::abort();
    bytes += kBlockBytes;
  }
  return bytes;
}

void BM_GetWhileDemoting(benchmark::State& state) {
  DemotingStore& shared = DemotingFixture();
  std::atomic<bool> stop{false};
  std::vector<uint64_t> put_bytes(static_cast<size_t>(state.range(0)), 0);
  std::vector<std::thread> putters;
  for (size_t p = 0; state.thread_index() == 0 && p < put_bytes.size(); ++p) {
    putters.emplace_back([&, p] { put_bytes[p] = PutUntil(*shared.store, stop); });
  }
  std::vector<uint8_t> out(kBlockBytes);
  uint64_t i = static_cast<uint64_t>(state.thread_index()) * 7;
  std::chrono::nanoseconds slowest{0};
  const auto started = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const testing::TestBlock& block = shared.hot[i++ % shared.hot.size()];
    const auto start = std::chrono::steady_clock::now();
    if (!shared.store->Get(block.ref(), out).ok()) state.SkipWithError("hot block missing");
    slowest = std::max(slowest, std::chrono::steady_clock::now() - start);
  }
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - started;
  stop = true;
  for (std::thread& putter : putters) putter.join();
  uint64_t put = 0;
  for (uint64_t bytes : put_bytes) put += bytes;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBlockBytes));
  state.counters["get_max_us"] = benchmark::Counter(static_cast<double>(slowest.count()) / 1000.0,
                                                    benchmark::Counter::kAvgThreads);
  state.counters["put_bytes_per_s"] = static_cast<double>(put) / elapsed.count();
}
BENCHMARK(BM_GetWhileDemoting)
    ->ArgName("putters")
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->ThreadRange(1, 2)
    ->UseRealTime();

// Puts of fresh blocks into a full host tier, each batch's victims moving down to disk:
// the put rate a node sustains once its host tier is full. Args: the disk tier's sync
// policy (0: wal, 1: fsync) and the blocks per put call (the victims of one call are
// written to disk together).
void BM_PutsDemotingToDisk(benchmark::State& state) {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("kvtier-demote-put-bench-" + std::to_string(::getpid()));
  const size_t per_put = static_cast<size_t>(state.range(1));
  {
    TieredStoreOptions options;
    options.host = HostTierOptions{};
    options.host->capacity_bytes = 32ull << 20;
    options.disk = DiskTierOptions{};
    options.disk->path = dir;
    options.disk->capacity_bytes = 4ull << 30;
    options.disk->sync = state.range(0) == 0 ? DiskSync::kWal : DiskSync::kFsync;
    std::unique_ptr<TieredStore> store = TieredStore::Create(std::move(options)).value();
    testing::TestBlock block = testing::MakeBlock(1, kBlockBytes);
    std::vector<PutItem> items(per_put,
                               PutItem{block.header, block.payload, /*checksum_checked=*/true});
    uint64_t next_id = 1;
    for (uint64_t filled = 0; filled < (32ull << 20) / kBlockBytes;
         ++filled) {  // the host tier, full
      items[0].header.key.lo = next_id++;
      if (!store->PutBatch({items.data(), 1}).front().ok()) std::abort();
    }
    for (auto _ : state) {
      for (PutItem& item : items) item.header.key.lo = next_id++;
      for (const Status& put : store->PutBatch(items)) {
        if (!put.ok()) state.SkipWithError(put.ToString().c_str());
      }
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * per_put * kBlockBytes));
    state.counters["demoted"] = static_cast<double>(store->Stats().demoted);
  }
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_PutsDemotingToDisk)
    ->ArgNames({"fsync", "blocks_per_put"})
    ->ArgsProduct({{0, 1}, {1, 4}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvtier::storage
