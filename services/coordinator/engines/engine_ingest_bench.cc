// Micro-benchmark of engine event ingest on one core, after the ZMQ receive: a
// vLLM-style msgpack payload decoded (DecodeEngineEvents), keyed
// (EngineBlockMap: kvtier's SHA-256 chained keys and the tenant's salt) and
// applied to the coordinator's index (EngineNodes, sequenced batches), chains
// of 16 blocks of 16 tokens stored and later removed. Run:
// build/bin/engine_ingest_bench
#include <benchmark/benchmark.h>

#include <msgpack.hpp>
#include <numeric>

#include "services/coordinator/engines/engine_blocks.h"
#include "services/coordinator/engines/engine_event.h"
#include "services/coordinator/engines/engine_nodes.h"

namespace kvtier::coordinator {
namespace {

constexpr uint32_t kBlocks = 16;
constexpr uint32_t kTokensPerBlock = 16;
constexpr uint64_t kChains = 1024;  // stored, then removed, round after round

std::string Payload(uint64_t chain, bool store) {
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> p(b);
  p.pack_array(3);
  p.pack(1700000000.0);
  p.pack_array(1);
  p.pack_array(store ? 7 : 3);
  p.pack(store ? "BlockStored" : "BlockRemoved");
  p.pack_array(kBlocks);
  for (uint32_t i = 0; i < kBlocks; ++i) p.pack(chain * kBlocks + i + 1);
  if (store) {
    p.pack_nil();
    p.pack_array(kBlocks * kTokensPerBlock);
    for (uint32_t t = 0; t < kBlocks * kTokensPerBlock; ++t)
      p.pack(static_cast<uint32_t>(chain * 7919 + t));
    p.pack(kTokensPerBlock);
    p.pack_nil();
  }
  p.pack("GPU");
  p.pack(0);
  return std::string(b.data(), b.size());
}

void BM_IngestBlockEvents(benchmark::State& state) {
  CoordinatorOptions options;
  options.index.expected_blocks = kChains * kBlocks;
  std::unique_ptr<Coordinator> coordinator = std::move(Coordinator::Create(options)).value();
  ScopeRegistry scopes;
  EngineNodes nodes(*coordinator, scopes);
  EngineBlockMap map(
      {.space = {
           .tenant = KeySalt("team-a"), .model = "llama", .tokens_per_block = kTokensPerBlock}});
  std::vector<std::string> payloads;
  for (uint64_t c = 0; c < kChains; ++c) payloads.push_back(Payload(c, true));
  for (uint64_t c = 0; c < kChains; ++c) payloads.push_back(Payload(c, false));
  std::vector<EngineUpdate> updates(1);
  // The instance registers and sends its (empty) snapshot first, as the feed
  // does.
  updates[0] = EngineUpdate{.node = "vllm-0", .salt_scope = SaltScope("team-a")};
  (void)nodes.Apply(updates);
  updates[0] = EngineUpdate{
      .kind = EngineUpdate::Kind::kSnapshot, .node = "vllm-0", .salt_scope = SaltScope("team-a")};
  (void)nodes.Apply(updates);
  const uint64_t scope = SaltScope("team-a");  // once, as the feed's EngineSource has it
  size_t i = 0;
  for (auto _ : state) {
    const std::string& payload = payloads[i++ % payloads.size()];
    Result<EngineEventBatch> batch = DecodeEngineEvents(
        std::span(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()));
    updates.assign(1, EngineUpdate{.node = "vllm-0", .salt_scope = scope});
    for (const EngineEvent& e : batch->events) map.Apply(e, updates[0].events);
    benchmark::DoNotOptimize(nodes.Apply(updates));
  }
  if (nodes.stats().refused_batches != 0) state.SkipWithError("the index refused a batch");
  state.SetItemsProcessed(state.iterations() * kBlocks);
  state.counters["index_blocks"] = static_cast<double>(coordinator->Stats().index.blocks);
}
BENCHMARK(BM_IngestBlockEvents);

// The decoder alone.
void BM_DecodeBlockStored(benchmark::State& state) {
  const std::string payload = Payload(3, true);
  for (auto _ : state) {
    benchmark::DoNotOptimize(DecodeEngineEvents(
        std::span(reinterpret_cast<const uint8_t*>(payload.data()), payload.size())));
  }
  state.SetItemsProcessed(state.iterations() * kBlocks);
}
BENCHMARK(BM_DecodeBlockStored);

}  // namespace
}  // namespace kvtier::coordinator
