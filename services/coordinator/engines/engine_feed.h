// EngineFeed: subscribes to inference engines' KV event streams (ZMQ) and turns
// them into updates of the coordinator's index.
//
// For each configured engine it connects a SUB socket to the engine's `events`
// endpoint (frames [topic, seq (8 bytes big-endian), msgpack payload]) and,
// where the engine has one, a DEALER to its `replay` endpoint (request ["",
// start_seq]; replies [seq, payload] or [topic, seq, payload] after the empty
// delimiter, ended by seq 0xff..ff or an empty payload). EngineSequencer orders
// the messages, DecodeEngineEvents decodes them and one EngineBlockMap per
// (engine, dp rank) maps them to kvtier keys. A malformed frame or payload is
// counted, logged (sampled) with the engine's name and dropped; the
// subscription goes on.
//
// Updates go to `sink` from the feed's thread, a batch at a time (everything
// that arrived since the last call): the sink applies them where the index
// lives (EngineNodes on the coordinator's loop) and returns the instances the
// index needs a snapshot of, which the feed sends with its next batch.
//
// Metrics (labelled by engine): kvtier_engine_events_total{kind},
// _messages_total, _decode_errors_total, _sequence_gaps_total, _replays_total,
// _clears_total{reason}, _unknown_parent_blocks_total, _lag_seconds (now minus
// the last batch's ts), _blocks.
//
// Thread safety: Create() starts one thread that owns every socket;
// Reconfigure() and the destructor may be called from any one other thread.
// Ownership: the registry, clock and sink's captures outlive the feed.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/metrics.h"
#include "common/status.h"
#include "services/coordinator/engines/engine_blocks.h"
#include "services/coordinator/engines/engine_nodes.h"

namespace kvtier::coordinator {

// One engine publisher, resolved from configuration.
struct EngineSource {
  std::string name = {};
  std::string events = {};  // tcp://host:port
  std::string replay = {};  // empty: no replay endpoint
  EngineFormat format = EngineFormat::kVllm;
  EngineKeySpace space = {};
  uint64_t salt_scope = 0;  // SaltScope of the engine's tenant
  std::string tenant = {};  // its name, for logs
  bool discover = false;    // names a set of engines by DNS (engine_discovery.h), not one
};

using EngineUpdateSink =
    std::function<std::vector<std::string>(std::vector<EngineUpdate>& updates)>;

struct EngineFeedOptions {
  std::vector<EngineSource> engines = {};
  EngineUpdateSink sink = {};           // required
  MetricsRegistry* registry = nullptr;  // required
  const Clock* clock = &SystemClock::Instance();
  Nanos replay_timeout = std::chrono::seconds(2);
  size_t max_message_bytes = size_t{64} << 20;
  size_t max_blocks_per_instance = size_t{1} << 22;
};

class EngineFeed {
 public:
  // kInvalidArgument: a bad endpoint, two engines of one name, tokens_per_block
  // 0.
  [[nodiscard]] static Result<std::unique_ptr<EngineFeed>> Create(EngineFeedOptions options);
  ~EngineFeed();
  EngineFeed(const EngineFeed&) = delete;
  EngineFeed& operator=(const EngineFeed&) = delete;

  // Replaces the engine list: engines no longer listed leave the index, new
  // ones are subscribed, changed ones start over. Checked as Create checks;
  // nothing changes on error.
  [[nodiscard]] Status Reconfigure(std::vector<EngineSource> engines);

  class Impl;

 private:
  explicit EngineFeed(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Checks an engine list as Create does.
[[nodiscard]] Status ValidateEngineSources(const std::vector<EngineSource>& engines);

}  // namespace kvtier::coordinator
