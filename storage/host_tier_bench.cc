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

// The cost of lending pages to zero-copy sends (PinnedBlock::UnpinLent): each put of a
// fresh block into a full 256 MiB tier is then pinned and unpinned, as a data stream get
// of it would, lent (arg 1) or not (0). Lent, every page a put reuses was lent before and
// has its memory replaced first (MADV_DONTNEED, then a fault per 4 KiB as it is written).
// Each arg has a tier of its own, so that no page lent under arg 1 reaches arg 0.
HostTier& LendingTier(bool lent) {
  static std::unique_ptr<HostTier>* tiers = [] {
    auto* made = new std::unique_ptr<HostTier>[2];
    HostTierOptions options;
    options.capacity_bytes = 256ull << 20;
    for (int i = 0; i < 2; ++i) made[i] = HostTier::Create(options).value();
    return made;
  }();
  return *tiers[lent ? 1 : 0];
}

void BM_HostTierPutOverLentPages(benchmark::State& state) {
  const bool lent = state.range(0) != 0;
  HostTier& tier = LendingTier(lent);
  testing::PutFreshBlocks(state, kBlockBytes, /*checked=*/true, [&](const PutItem& item) {
    Status put = std::move(tier.PutBatch({&item, 1}).front());
    Result<PinnedBlock> pin =
        tier.Pin({item.header.key, item.header.format_tag, item.header.salt_scope});
    if (pin.ok() && lent) pin->UnpinLent();
    return put;
  });
}
BENCHMARK(BM_HostTierPutOverLentPages)
    ->ArgName("lent")
    ->Arg(0)
    ->Arg(1)
    ->ThreadRange(1, 4)
    ->UseRealTime();

// The checksum every put, get and peer fetch computes or verifies once per block
// (storage/fast_xxh3.h), on one thread, by block size.
void BM_PayloadChecksum(benchmark::State& state) {
  const std::vector<uint8_t> payload =
      testing::MakeBlock(1, static_cast<size_t>(state.range(0))).payload;
  for (auto _ : state) benchmark::DoNotOptimize(PayloadChecksum(payload));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_PayloadChecksum)->ArgName("block_bytes")->Arg(64 << 10)->Arg(256 << 10)->Arg(2 << 20);

}  // namespace
}  // namespace kvtier::storage
