// HostTier get and put throughput from 1 to 16 threads at once: copies run outside the
// tier's lock, so threads copying different blocks should scale with cores (until memory
// bandwidth runs out). Each thread has its own buffer; blocks are 256 KiB in a 1 GiB tier.
// Also the payload checksum alone, the per-byte cost that every tier and stream path shares.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "storage/host_tier.h"
#include "storage/testing/blocks.h"
#include "storage/testing/put_bench.h"

namespace kvtier::storage {
namespace {

constexpr size_t kBlockBytes = 256 * 1024;
constexpr uint64_t kBlocks = 2048;  // 512 MiB of payload

struct Shared {
  std::unique_ptr<HostTier> tier;
  std::vector<testing::TestBlock> blocks;
};

Shared& Fixture() {
  static Shared* shared = [] {
    auto* s = new Shared();
    HostTierOptions options;
    options.capacity_bytes = 1ull << 30;
    s->tier = HostTier::Create(options).value();
    for (uint64_t id = 0; id < kBlocks; ++id) {
      s->blocks.push_back(testing::MakeBlock(id, kBlockBytes));
      if (!s->tier->Put(s->blocks.back().header, s->blocks.back().payload).ok()) std::abort();
    }
    return s;
  }();
  return *shared;
}

void BM_HostTierGet(benchmark::State& state) {
  Shared& shared = Fixture();
  std::vector<uint8_t> out(kBlockBytes);
  uint64_t i = static_cast<uint64_t>(state.thread_index()) * 7919;
  for (auto _ : state) {
    const testing::TestBlock& block = shared.blocks[i++ % kBlocks];
    if (!shared.tier->Get(block.ref(), out).ok()) state.SkipWithError("miss");
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBlockBytes));
}
BENCHMARK(BM_HostTierGet)->ThreadRange(1, 16)->UseRealTime();

// Puts of blocks the tier holds already only refresh their policy; these put fresh keys
// (the tier evicts the oldest to make room), each thread its own key range.
// Arg 1: as one-block batches whose payload the caller has hashed (checksum_checked, as
// the data stream's puts): the copy without the tier's XXH3 pass.
void BM_HostTierPut(benchmark::State& state) {
  Shared& shared = Fixture();
  testing::PutFreshBlocks(state, kBlockBytes, state.range(0) != 0, [&](const PutItem& item) {
    return item.checksum_checked ? std::move(shared.tier->PutBatch({&item, 1}).front())
                                 : shared.tier->Put(item.header, item.payload);
  });
}
BENCHMARK(BM_HostTierPut)->ArgName("checked")->Arg(0)->Arg(1)->ThreadRange(1, 16)->UseRealTime();

// The checksum every put, get and peer fetch computes or verifies once per block
// (storage/fast_xxh3.h), on one thread, by block size.
void BM_PayloadChecksum(benchmark::State& state) {
  const std::vector<uint8_t> payload = testing::MakeBlock(1, static_cast<size_t>(state.range(0))).payload;
  for (auto _ : state) benchmark::DoNotOptimize(PayloadChecksum(payload));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_PayloadChecksum)->ArgName("block_bytes")->Arg(64 << 10)->Arg(256 << 10)->Arg(2 << 20);

}  // namespace
}  // namespace kvtier::storage
