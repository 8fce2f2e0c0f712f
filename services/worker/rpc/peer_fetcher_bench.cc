// Google Benchmark: a worker fetching a prefix's blocks from a peer (PeerFetcher) on
// loopback, the payloads inline in Cap'n Proto messages or on the peer's data stream.
//
// The peer is a coordinator process's BlockStore over a host tier that holds every block
// (as a storage node's would) or, with `pool`, over empty tiers with every block in a
// source beside them that the BlockStore reads on its loop (as a worker's pool: copied,
// its checksum left to the server); one fetch of `blocks` blocks at a time, each checked
// (key, scope, format, size, XXH3) and landed in the fetch's buffer as onboarding does.
// `loop_us`: the time per fetch that the source's reads held the peer's loop (a worker's
// loop, which its engines' calls wait for).
// Arguments: stream (0 inline, 1 stream), block bytes, blocks per fetch, pool (0 or 1).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <kj/async-io.h>

#include "common/malloc_tuning.h"
#include "services/store/rpc/store_service.h"
#include "services/worker/rpc/node_connections.h"
#include "services/worker/rpc/peer_fetcher.h"
#include "services/worker/rpc/peer_node_testing.h"

namespace kvtier::worker {
namespace {

constexpr char kFormat[] = "bench|fetch";
constexpr uint64_t kScope = 9;
constexpr uint64_t kStoredBlocks = 64;

// As in the kvtier binary, whose worker this measures (common/malloc_tuning.h).
[[maybe_unused]] const bool kMallocTuned = (KeepLargeAllocationsInTheHeap(), true);

// Blocks held beside the tiers, as a worker's pool: read on the BlockStore's loop, which
// it times.
class PoolSource final : public store::ExtraBlockSource {
 public:
  void Add(storage::BlockHeader header, std::vector<uint8_t> payload) {
    blocks_.emplace(header.key, std::make_pair(std::move(header), std::move(payload)));
  }
  Result<storage::BlockHeader> Peek(const storage::BlockRef& ref) override {
    const auto it = blocks_.find(ref.key);
    if (it == blocks_.end() || ref.format_tag != kFormat || ref.salt_scope != kScope) return NotFoundError("not held");
    storage::BlockHeader header = it->second.first;
    header.checksum = 0;  // as a pool's: computed as read
    return header;
  }
  Result<storage::BlockHeader> Read(const storage::BlockRef& ref, std::span<uint8_t> out) override {
    const auto start = std::chrono::steady_clock::now();
    KVTIER_ASSIGN_OR_RETURN(storage::BlockHeader header, Peek(ref));
    const std::vector<uint8_t>& payload = blocks_.at(ref.key).second;
    std::copy(payload.begin(), payload.end(), out.begin());
    read_ns_ += static_cast<uint64_t>(std::chrono::nanoseconds(std::chrono::steady_clock::now() - start).count());
    return header;
  }
  uint64_t read_ns() const { return read_ns_; }

 private:
  std::atomic<uint64_t> read_ns_{0};  // written on the loop, read by the bench between fetches
  std::unordered_map<BlockKey, std::pair<storage::BlockHeader, std::vector<uint8_t>>, BlockKeyHash> blocks_;
};

class Peer {
 public:
  Peer(bool stream, uint64_t block_bytes, bool pool) {
    storage::TieredStoreOptions tiers;
    tiers.host.emplace();
    tiers.host->capacity_bytes = (kStoredBlocks + 4) * ((block_bytes + 65535) / 65536 * 65536);
    store_ = storage::TieredStore::Create(std::move(tiers)).value();
    std::vector<uint8_t> payload(block_bytes);
    for (uint64_t id = 0; id < kStoredBlocks; ++id) {
      for (size_t i = 0; i < payload.size(); i += 64) payload[i] = static_cast<uint8_t>(id * 31 + i);
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
          return store::MakeBlockStoreService(
              {.store = store_.get(), .extra = pool ? &pool_ : nullptr, .stream = stream_.get()}, tenant);
        },
        "peer/store", "127.0.0.1:0", std::chrono::hours(1));
    nodes_ = NodeConnections::Create({.coordinator_address = node_->endpoints()[0], .token = "auth is off"}).value();
    fetcher_ = PeerFetcher::Create({.connections = nodes_.get(), .threads = 1, .stream_min_block_bytes = 0}).value();
  }
  ~Peer() {
    fetcher_.reset();
    nodes_.reset();
    node_.reset();
  }

  PeerFetcher& fetcher() { return *fetcher_; }
  uint64_t pool_read_ns() const { return pool_.read_ns(); }

 private:
  std::unique_ptr<storage::TieredStore> store_;
  PoolSource pool_;  // pool: every block; read on the node's loop, which node_ joins before it goes
  std::unique_ptr<store::DataStreamServer> stream_;
  MetricsRegistry registry_;
  std::unique_ptr<coordinator::CoordinatorNode> node_;
  std::unique_ptr<NodeConnections> nodes_;
  std::unique_ptr<PeerFetcher> fetcher_;
};

void BM_PeerFetch(benchmark::State& state) {
  const bool stream = state.range(0) != 0;
  const auto block_bytes = static_cast<uint64_t>(state.range(1));
  const auto blocks = static_cast<uint64_t>(state.range(2));
  const bool pool = state.range(3) != 0;
  Peer peer(stream, block_bytes, pool);
  auto io = kj::setupAsyncIo();
  uint64_t next = 0;
  for (auto _ : state) {
    PeerFetchRequest request{{"peer/store"}, {}, kFormat, kScope, block_bytes};
    for (uint64_t i = 0; i < blocks; ++i) request.keys.push_back(BlockKey{5, (next + i) % kStoredBlocks});
    next += blocks;
    const FetchedBlocks fetched = peer.fetcher().Fetch(std::move(request)).wait(io.waitScope);
    if (fetched.keys.size() != blocks || fetched.streamed != (stream ? blocks : 0)) {
      const std::string error = "the fetch brought " + std::to_string(fetched.keys.size()) + " of " +
                                std::to_string(blocks) + " blocks, " + std::to_string(fetched.streamed) +
                                " on the stream, " + std::to_string(fetched.rejected) + " rejected";
      state.SkipWithError(error.c_str());
      break;
    }
    benchmark::DoNotOptimize(fetched.bytes.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * blocks * block_bytes));
  if (pool) {
    state.counters["loop_us"] = benchmark::Counter(static_cast<double>(peer.pool_read_ns()) / 1e3,
                                                   benchmark::Counter::kAvgIterations);
  }
  state.SetLabel(std::string(stream ? "stream" : "inline") + (pool ? ", from a pool" : ", from the tiers"));
}
BENCHMARK(BM_PeerFetch)
    ->ArgNames({"stream", "block_bytes", "blocks", "pool"})
    ->ArgsProduct({{0, 1}, {64 << 10, 256 << 10, 2 << 20}, {16}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvtier::worker
