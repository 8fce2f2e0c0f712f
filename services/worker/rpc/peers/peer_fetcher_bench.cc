// Google Benchmark: a worker fetching a prefix's blocks from a peer (PeerFetcher) on
// loopback, the payloads inline in Cap'n Proto messages or on the peer's data stream.
//
// The peer is a coordinator process's BlockStore over a host tier that holds every block
// (as a storage node's would) or, with `pool`, over empty tiers with every block in a
// source beside them that the BlockStore calls on its loop (as a worker's pool, its
// checksum left to the server): pool 1 copies each block on the loop (a GPU pool's
// gather), pool 2 holds them in place for the keyed get to copy off the loop (a host
// pool). One fetch of `blocks` blocks at a time, each checked (key, scope, format, size,
// XXH3) and landed in the fetch's buffer as onboarding does.
// `loop_us`: the time per fetch that the source's calls held the peer's loop (a worker's
// loop, which its engines' calls wait for). `loop_wait_*_us`: what a call to the peer's
// loop waits while the fetches run, as an engine's call to that worker would: a thread
// of the bench runs a no-op there every 250 us (kj::Executor::executeSync), timed from
// send to return.
// Arguments: stream (0 inline, 1 stream), block bytes, blocks per fetch, pool (0, 1, 2).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <kj/async-io.h>

#include "common/malloc_tuning.h"
#include "common/mutex.h"
#include "services/store/rpc/store_service.h"
#include "services/worker/rpc/peers/node_connections.h"
#include "services/worker/rpc/peers/peer_fetcher.h"
#include "services/worker/rpc/peers/peer_node_testing.h"

namespace kvtier::worker {
namespace {

constexpr char kFormat[] = "bench|fetch";
constexpr uint64_t kScope = 9;
constexpr uint64_t kStoredBlocks = 64;

// As in the kvtier binary, whose worker this measures (common/malloc_tuning.h).
[[maybe_unused]] const bool kMallocTuned = (KeepLargeAllocationsInTheHeap(), true);

// Blocks held beside the tiers, as a worker's pool: found and read on the BlockStore's
// loop, which it times. With `hold`, HoldBatch holds them in place (a host pool's way:
// the keyed get sends them from their pages, off the loop, and gives back the checksum it
// computed, which the source keeps for the next fetch of the block); without, each is
// copied on the loop (a GPU pool's way, where the gather runs there).
class PoolSource final : public store::ExtraBlockSource {
 public:
  explicit PoolSource(bool hold) : hold_(hold) {}
  void Add(storage::BlockHeader header, std::vector<uint8_t> payload) {
    blocks_.emplace(header.key, std::make_pair(std::move(header), std::move(payload)));
  }
  Result<storage::BlockHeader> Peek(const storage::BlockRef& ref) override {
    const auto it = blocks_.find(ref.key);
    if (it == blocks_.end() || ref.format_tag != kFormat || ref.salt_scope != kScope)
      return NotFoundError("not held");
    storage::BlockHeader header = it->second.first;
    // As a pool's: computed as read, until a reader that held the block gave it back.
    const auto kept = kept_checksums_.find(ref.key.lo);
    header.checksum = kept != kept_checksums_.end() ? kept->second : 0;
    return header;
  }
  Result<storage::BlockHeader> Read(const storage::BlockRef& ref, std::span<uint8_t> out) override {
    const Timed timed(loop_ns_);
    KVTIER_ASSIGN_OR_RETURN(storage::BlockHeader header, Peek(ref));
    const std::vector<uint8_t>& payload = blocks_.at(ref.key).second;
    std::copy(payload.begin(), payload.end(), out.begin());
    return header;
  }
  std::vector<Result<store::HeldBlock>> HoldBatch(
      std::span<const storage::BlockRef> refs) override {
    const Timed timed(loop_ns_);
    std::vector<Result<store::HeldBlock>> found = ExtraBlockSource::HoldBatch(refs);
    for (size_t i = 0; hold_ && i < refs.size(); ++i) {
      if (!found[i].ok()) continue;
      found[i]->held = blocks_.at(refs[i].key).second;
      found[i]->hold = refs[i].key.lo;  // the blocks' keys differ in `lo`
    }
    return found;
  }
  Status ReleaseBatch(std::span<const uint64_t> holds,
                      std::span<const uint64_t> checksums) override {
    const Timed timed(loop_ns_);
    for (size_t i = 0; i < checksums.size(); ++i) {
      if (checksums[i] != 0) kept_checksums_[holds[i]] = checksums[i];
    }
    return Status::Ok();
  }
  uint64_t loop_ns() const { return loop_ns_; }

 private:
  // Adds the time of its scope to `total`.
  struct Timed {
    explicit Timed(std::atomic<uint64_t>& total) : total(total) {}
    ~Timed() {
      total += static_cast<uint64_t>(
          std::chrono::nanoseconds(std::chrono::steady_clock::now() - start).count());
    }
    std::atomic<uint64_t>& total;
    const std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  };

  const bool hold_;
  std::atomic<uint64_t> loop_ns_{0};  // written on the loop, read by the bench between fetches
  std::unordered_map<BlockKey, std::pair<storage::BlockHeader, std::vector<uint8_t>>, BlockKeyHash>
      blocks_;
  std::unordered_map<uint64_t, uint64_t> kept_checksums_;  // by hold: as a pool keeps them (pool:2)
};

// Times no-op calls to one event loop from a thread of its own while bound and started.
class LoopProbe {
 public:
  ~LoopProbe() { Stop(); }
  // On the loop's thread; the first call binds.
  void BindToThisLoop() {
    MutexLock lock(mu_);
    if (loop_.get() == nullptr) loop_ = kj::getCurrentThreadExecutor().addRef();
  }
  void Start() {
    stop_ = false;
    thread_ = std::thread([this] { Run(); });
  }
  // Stops the probe; the waits it saw, sorted (microseconds). REQUIRES: the loop still runs.
  std::vector<double> Stop() {
    if (!thread_.joinable()) return {};
    stop_ = true;
    thread_.join();
    MutexLock lock(mu_);
    std::sort(waits_us_.begin(), waits_us_.end());
    return std::exchange(waits_us_, {});
  }

 private:
  void Run() {
    auto next = std::chrono::steady_clock::now();
    while (!stop_) {
      next += std::chrono::microseconds(250);
      std::this_thread::sleep_until(next);
      const kj::Executor* loop = nullptr;  // bound once, then kept: called without the lock,
      {                                    // which the loop's thread takes to bind
        MutexLock lock(mu_);
        loop = loop_.get();
      }
      if (loop == nullptr) continue;  // no connection yet: the first fetch binds it
      const auto sent = std::chrono::steady_clock::now();
      loop->executeSync([] {});
      const auto waited =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - sent);
      MutexLock lock(mu_);
      waits_us_.push_back(waited.count());
      next = std::max(next, std::chrono::steady_clock::now());  // no catching up after a long wait
    }
  }

  Mutex mu_;
  kj::Own<const kj::Executor> loop_;
  std::vector<double> waits_us_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1,
                         static_cast<size_t>(q * static_cast<double>(sorted.size())))];
}

class Peer {
 public:
  // pool: 0 none (every block in the tiers), 1 a pool copied on the loop, 2 one held.
  Peer(bool stream, uint64_t block_bytes, int pool) : pool_(pool == 2) {
    storage::TieredStoreOptions tiers;
    tiers.host.emplace();
    tiers.host->capacity_bytes = (kStoredBlocks + 4) * ((block_bytes + 65535) / 65536 * 65536);
    store_ = storage::TieredStore::Create(std::move(tiers)).value();
    std::vector<uint8_t> payload(block_bytes);
    for (uint64_t id = 0; id < kStoredBlocks; ++id) {
      for (size_t i = 0; i < payload.size(); i += 64)
        payload[i] = static_cast<uint8_t>(id * 31 + i);
      storage::BlockHeader header;
      header.key = BlockKey{5, id};
      header.format_tag = kFormat;
      header.salt_scope = kScope;
      header.payload_bytes = block_bytes;
      header.checksum = storage::PayloadChecksum(payload);
      if (pool) {
        pool_.Add(header, payload);
      } else if (!store_->Put(header, payload).ok()) {
        std::abort();
      }
    }
    if (stream) stream_ = store::DataStreamServer::Create({.store = store_.get()}).value();
    node_ = testing::StartCoordinatorWithStoreNode(
        registry_,
        [this, pool](const auth::Tenant& tenant) {
          probe_.BindToThisLoop();
          return store::MakeBlockStoreService(
              {.store = store_.get(), .extra = pool ? &pool_ : nullptr, .stream = stream_.get()},
              tenant);
        },
        "peer/store", "127.0.0.1:0", std::chrono::hours(1));
    nodes_ = NodeConnections::Create(
                 {.coordinator_address = node_->endpoints()[0], .token = "auth is off"})
                 .value();
    fetcher_ = PeerFetcher::Create(
                   {.connections = nodes_.get(), .threads = 1, .stream_min_block_bytes = 0})
                   .value();
  }
  ~Peer() {
    probe_.Stop();
    fetcher_.reset();
    nodes_.reset();
    node_.reset();
  }

  PeerFetcher& fetcher() { return *fetcher_; }
  LoopProbe& probe() { return probe_; }
  uint64_t pool_loop_ns() const { return pool_.loop_ns(); }

 private:
  std::unique_ptr<storage::TieredStore> store_;
  PoolSource pool_;  // pool: every block; read on the node's loop, which node_ joins before it goes
  std::unique_ptr<store::DataStreamServer> stream_;
  MetricsRegistry registry_;
  std::unique_ptr<coordinator::CoordinatorNode> node_;
  std::unique_ptr<NodeConnections> nodes_;
  std::unique_ptr<PeerFetcher> fetcher_;
  LoopProbe probe_;  // of node_'s loop; stopped before node_ goes
};

void BM_PeerFetch(benchmark::State& state) {
  const bool stream = state.range(0) != 0;
  const auto block_bytes = static_cast<uint64_t>(state.range(1));
  const auto blocks = static_cast<uint64_t>(state.range(2));
  const auto pool = static_cast<int>(state.range(3));
  Peer peer(stream, block_bytes, pool);
  auto io = kj::setupAsyncIo();
  uint64_t next = 0;
  peer.probe().Start();
  for (auto _ : state) {
    PeerFetchRequest request{{"peer/store"}, {}, kFormat, kScope, block_bytes};
    for (uint64_t i = 0; i < blocks; ++i)
      request.keys.push_back(BlockKey{5, (next + i) % kStoredBlocks});
    next += blocks;
    const FetchedBlocks fetched = peer.fetcher().Fetch(std::move(request)).wait(io.waitScope);
    if (fetched.keys.size() != blocks || fetched.streamed != (stream ? blocks : 0)) {
      const std::string error = "the fetch brought " + std::to_string(fetched.keys.size()) +
                                " of " + std::to_string(blocks) + " blocks, " +
                                std::to_string(fetched.streamed) + " on the stream, " +
                                std::to_string(fetched.rejected) + " rejected";
      state.SkipWithError(error.c_str());
      break;
    }
    benchmark::DoNotOptimize(fetched.bytes.data());
  }
  const std::vector<double> waits = peer.probe().Stop();
  state.counters["loop_wait_p50_us"] = Percentile(waits, 0.5);
  state.counters["loop_wait_p99_us"] = Percentile(waits, 0.99);
  state.counters["loop_wait_max_us"] = waits.empty() ? 0 : waits.back();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * blocks * block_bytes));
  if (pool) {
    state.counters["loop_us"] = benchmark::Counter(static_cast<double>(peer.pool_loop_ns()) / 1e3,
                                                   benchmark::Counter::kAvgIterations);
  }
  const char* const from[] = {", from the tiers", ", from a pool copied on its loop",
                              ", from a pool held"};
  state.SetLabel(std::string(stream ? "stream" : "inline") + from[pool]);
}
BENCHMARK(BM_PeerFetch)
    ->ArgNames({"stream", "block_bytes", "blocks", "pool"})
    ->ArgsProduct({{0, 1}, {64 << 10, 256 << 10, 2 << 20}, {16}, {0, 1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The fetching side's whole landing: keyed gets from a peer's tiers into this worker's
// (host) pool. `land:0` fetches into the fetch's buffer, then copies each block into its
// pool block, as the worker's loop did before (the copy is timed: `landing_copy_us` per
// fetch); `land:1` lands the blocks in the pool blocks themselves (PeerFetchRequest::
// land_in), as a host pool's onboard does now.
void BM_PeerFetchIntoPool(benchmark::State& state) {
  const auto block_bytes = static_cast<uint64_t>(state.range(0));
  const auto blocks = static_cast<uint64_t>(state.range(1));
  const bool land = state.range(2) != 0;
  Peer peer(/*stream=*/true, block_bytes, /*pool=*/0);
  auto io = kj::setupAsyncIo();
  std::vector<uint8_t> pool(blocks * block_bytes, 0);  // this worker's pool blocks, touched once
  std::vector<std::span<uint8_t>> places;
  for (uint64_t i = 0; i < blocks; ++i)
    places.emplace_back(pool.data() + i * block_bytes, block_bytes);
  uint64_t next = 0;
  double copy_ns = 0;
  for (auto _ : state) {
    PeerFetchRequest request{{"peer/store"}, {}, kFormat, kScope, block_bytes};
    for (uint64_t i = 0; i < blocks; ++i)
      request.keys.push_back(BlockKey{5, (next + i) % kStoredBlocks});
    next += blocks;
    if (land) request.land_in = places;
    const FetchedBlocks fetched = peer.fetcher().Fetch(std::move(request)).wait(io.waitScope);
    if (fetched.keys.size() != blocks) {
      state.SkipWithError("the fetch brought fewer blocks than asked");
      break;
    }
    if (!land) {
      const auto start = std::chrono::steady_clock::now();
      for (uint64_t i = 0; i < blocks; ++i) {
        std::memcpy(places[i].data(), fetched.bytes.data() + i * block_bytes, block_bytes);
      }
      copy_ns += static_cast<double>(
          std::chrono::nanoseconds(std::chrono::steady_clock::now() - start).count());
    }
    benchmark::DoNotOptimize(pool.data());
  }
  state.counters["landing_copy_us"] =
      benchmark::Counter(copy_ns / 1e3, benchmark::Counter::kAvgIterations);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * blocks * block_bytes));
  state.SetLabel(land ? "landed in the pool" : "buffered, then copied into the pool");
}
BENCHMARK(BM_PeerFetchIntoPool)
    ->ArgNames({"block_bytes", "blocks", "land"})
    ->ArgsProduct({{64 << 10, 256 << 10, 2 << 20}, {16}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvtier::worker
