// Fuzz target: an engine's msgpack payload, as a hostile or broken publisher
// sends it. Beyond no crash and no sanitizer report: a decoded batch holds to
// the checks the decoder promises (token ids a whole number of blocks, extra
// keys one per block), and mapping it to kvtier keys (EngineBlockMap) never
// crashes either.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "services/coordinator/engines/engine_blocks.h"
#include "services/coordinator/engines/engine_event.h"
#include "tests/testing/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier::coordinator;
  kvtier::Result<EngineEventBatch> batch = DecodeEngineEvents(
      std::span(data, size), {.max_payload_bytes = 1 << 20, .max_elements = 1 << 16});
  if (!batch.ok()) return 0;
  EngineBlockMap map({.space = {.tokens_per_block = 3}, .max_blocks = 4096});
  std::vector<KvEvent> out;
  for (const EngineEvent& event : batch->events) {
    if (const auto* stored = std::get_if<EngineBlockStored>(&event)) {
      kvtier::testing::FuzzCheck(stored->block_size > 0, "stored->block_size > 0");
      kvtier::testing::FuzzCheck(
          stored->tokens.size() == stored->hashes.size() * stored->block_size,
          "stored->tokens.size() == "
          "stored->hashes.size() * stored->block_size");
      kvtier::testing::FuzzCheck(
          stored->extra_keys.empty() || stored->extra_keys.size() == stored->hashes.size(),
          "stored->extra_keys.empty() || stored->extra_keys.size() == "
          "stored->hashes.size()");
    }
    map.Apply(event, out);
  }
  for (const KvEvent& e : out) {
    if (e.kind == KvEvent::Kind::kStored)
      kvtier::testing::FuzzCheck(e.tokens.size() == e.keys.size() * 3,
                                 "e.tokens.size() == e.keys.size() * 3");
  }
  return 0;
}
