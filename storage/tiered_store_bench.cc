// TieredStore puts from 1 to 16 threads into its host tier: they share the store's lock
// and tell their events under the host tier's, so their copies (and checks) run in
// parallel. 256 KiB blocks of fresh keys into a 1 GiB host tier (no disk tier: nothing
// demoted), the events counted as a node's stream would take them.
#include <benchmark/benchmark.h>

#include <atomic>
#include <memory>

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
    options.on_event = [s](const StoreEvent&) { s->events.fetch_add(1, std::memory_order_relaxed); };
    s->store = TieredStore::Create(std::move(options)).value();
    return s;
  }();
  return *shared;
}

// Arg 1: as the data stream puts (one-block batches it has hashed already).
void BM_TieredStorePut(benchmark::State& state) {
  Shared& shared = Fixture();
  testing::PutFreshBlocks(state, kBlockBytes, state.range(0) != 0,
                          [&](const PutItem& item) { return std::move(shared.store->PutBatch({&item, 1}).front()); });
}
BENCHMARK(BM_TieredStorePut)->ArgName("checked")->Arg(0)->Arg(1)->ThreadRange(1, 16)->UseRealTime();

}  // namespace
}  // namespace kvtier::storage
