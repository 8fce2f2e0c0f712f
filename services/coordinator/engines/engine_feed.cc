#include "services/coordinator/engines/engine_feed.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/mutex.h"
#include "common/thread_name.h"
#include "fmt/format.h"
#include "services/coordinator/engines/engine_sequencer.h"

namespace kvtier::coordinator {
namespace {

constexpr uint64_t kEndOfReplay = ~uint64_t{0};
constexpr size_t kMaxMessagesPerRead = 1024;

uint64_t BigEndian64(const zmq::message_t& frame) {
  uint64_t v = 0;
  const auto* p = static_cast<const uint8_t*>(frame.data());
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

zmq::message_t BigEndianFrame(uint64_t v) {
  zmq::message_t frame(8);
  auto* p = static_cast<uint8_t*>(frame.data());
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<uint8_t>(v);
  return frame;
}

// Logs the 1st, 2nd, 4th, 8th... occurrence: a publisher sending garbage cannot
// flood the log.
bool Sampled(uint64_t count) { return (count & (count - 1)) == 0; }

struct EngineMetrics {
  Counter* stored = nullptr;
  Counter* removed = nullptr;
  Counter* cleared = nullptr;
  Counter* messages = nullptr;
  Counter* decode_errors = nullptr;
  Counter* gaps = nullptr;
  Counter* replays = nullptr;
  Counter* unknown_parent = nullptr;
  std::array<Counter*, static_cast<size_t>(EngineClearReason::kCount)> clears{};
  Gauge* lag = nullptr;
  Gauge* blocks = nullptr;
};

struct MetricFamilies {
  CounterFamily* events = nullptr;
  CounterFamily* messages = nullptr;
  CounterFamily* decode_errors = nullptr;
  CounterFamily* gaps = nullptr;
  CounterFamily* replays = nullptr;
  CounterFamily* clears = nullptr;
  CounterFamily* unknown_parent = nullptr;
  GaugeFamily* lag = nullptr;
  GaugeFamily* blocks = nullptr;

  Status Register(MetricsRegistry& r) {
    KVTIER_ASSIGN_OR_RETURN(
        events, r.AddCounter("kvtier_engine_events_total",
                             "KV events received from inference engines, by engine and kind",
                             {"engine", "kind"}));
    KVTIER_ASSIGN_OR_RETURN(
        messages,
        r.AddCounter("kvtier_engine_messages_total",
                     "ZMQ messages received from engines (live and replayed)", {"engine"}));
    KVTIER_ASSIGN_OR_RETURN(decode_errors,
                            r.AddCounter("kvtier_engine_decode_errors_total",
                                         "Engine messages dropped as malformed", {"engine"}));
    KVTIER_ASSIGN_OR_RETURN(gaps, r.AddCounter("kvtier_engine_sequence_gaps_total",
                                               "Gaps in an engine's sequence numbers", {"engine"}));
    KVTIER_ASSIGN_OR_RETURN(
        replays, r.AddCounter("kvtier_engine_replays_total",
                              "Replays asked of an engine's replay endpoint", {"engine"}));
    KVTIER_ASSIGN_OR_RETURN(
        clears,
        r.AddCounter("kvtier_engine_clears_total",
                     "Times an engine's blocks left the index, by reason", {"engine", "reason"}));
    KVTIER_ASSIGN_OR_RETURN(
        unknown_parent,
        r.AddCounter("kvtier_engine_unknown_parent_blocks_total",
                     "Stored engine blocks whose parent kvtier never learned", {"engine"}));
    KVTIER_ASSIGN_OR_RETURN(
        lag, r.AddGauge("kvtier_engine_lag_seconds",
                        "Wall-clock time minus the ts of the engine's last batch", {"engine"}));
    KVTIER_ASSIGN_OR_RETURN(
        blocks, r.AddGauge("kvtier_engine_blocks",
                           "Engine blocks kvtier maps, over the engine's instances", {"engine"}));
    return Status::Ok();
  }

  EngineMetrics For(const std::string& engine) const {
    EngineMetrics m;
    m.stored = &events->WithLabels({engine, "stored"});
    m.removed = &events->WithLabels({engine, "removed"});
    m.cleared = &events->WithLabels({engine, "cleared"});
    m.messages = &messages->WithLabels({engine});
    m.decode_errors = &decode_errors->WithLabels({engine});
    m.gaps = &gaps->WithLabels({engine});
    m.replays = &replays->WithLabels({engine});
    m.unknown_parent = &unknown_parent->WithLabels({engine});
    for (size_t r = 0; r < m.clears.size(); ++r) {
      m.clears[r] =
          &clears->WithLabels({engine, EngineClearReasonName(static_cast<EngineClearReason>(r))});
    }
    m.lag = &lag->WithLabels({engine});
    m.blocks = &blocks->WithLabels({engine});
    return m;
  }
};

bool SameSource(const EngineSource& a, const EngineSource& b) {
  return a.name == b.name && a.events == b.events && a.replay == b.replay && a.format == b.format &&
         a.salt_scope == b.salt_scope && a.space.model == b.space.model &&
         a.space.tokens_per_block == b.space.tokens_per_block;
}

}  // namespace

Status ValidateEngineSources(const std::vector<EngineSource>& engines) {
  std::set<std::string> names;
  for (const EngineSource& e : engines) {
    const std::string what = fmt::format("engine \"{}\"", e.name);
    if (e.name.empty()) return InvalidArgumentError("an engine has no name");
    if (!names.insert(e.name).second) return InvalidArgumentError(what + " is listed twice");
    if (e.space.tokens_per_block == 0)
      return InvalidArgumentError(what + ": tokens_per_block must be positive");
    for (const std::string* endpoint : {&e.events, &e.replay}) {
      if (endpoint == &e.replay && endpoint->empty()) continue;
      if (!endpoint->starts_with("tcp://") && !endpoint->starts_with("ipc://") &&
          !endpoint->starts_with("inproc://")) {
        return InvalidArgumentError(fmt::format(
            "{}: endpoint \"{}\" is not tcp://host:port (or ipc://, inproc://)", what, *endpoint));
      }
    }
  }
  return Status::Ok();
}

// One engine publisher: its sockets, sequencer and the block maps of its dp
// ranks.
class Subscription final : public EngineSequencerSink {
 public:
  Subscription(zmq::context_t& context, EngineSource source, const EngineFeedOptions& options,
               EngineMetrics metrics)
      : source_(std::move(source)),
        options_(options),
        metrics_(metrics),
        sequencer_(
            {.can_replay = !source_.replay.empty(), .replay_timeout = options.replay_timeout},
            *this),
        sub_(context, zmq::socket_type::sub) {
    sub_.set(zmq::sockopt::linger, 0);
    sub_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options.max_message_bytes));
    sub_.set(zmq::sockopt::subscribe, "");
    sub_.set(zmq::sockopt::ipv6, 1);  // an [ipv6] endpoint (discovered pods of an IPv6 cluster)
    sub_.connect(source_.events);
    if (!source_.replay.empty()) {
      dealer_.emplace(context, zmq::socket_type::dealer);
      dealer_->set(zmq::sockopt::linger, 0);
      dealer_->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options.max_message_bytes));
      dealer_->set(zmq::sockopt::ipv6, 1);
      dealer_->connect(source_.replay);
    }
  }

  const EngineSource& source() const { return source_; }
  zmq::socket_t& sub() { return sub_; }
  zmq::socket_t* dealer() { return dealer_ ? &*dealer_ : nullptr; }

  void ReadLive(Nanos now, std::vector<EngineUpdate>& out) {
    out_ = &out;
    for (size_t n = 0; n < kMaxMessagesPerRead; ++n) {
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(sub_, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
      metrics_.messages->Inc();
      if (frames.size() != 3 || frames[1].size() != 8) {
        Malformed(
            fmt::format("a live message of {} frames (want [topic, seq, "
                        "payload] with an 8-byte seq)",
                        frames.size()));
        continue;
      }
      sequencer_.OnLive(BigEndian64(frames[1]), frames[2].to_string(), now);
    }
    out_ = nullptr;
  }

  void ReadReplay(std::vector<EngineUpdate>& out) {
    out_ = &out;
    for (size_t n = 0; dealer_ && n < kMaxMessagesPerRead; ++n) {
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(*dealer_, std::back_inserter(frames), zmq::recv_flags::dontwait))
        break;
      metrics_.messages->Inc();
      // After the empty delimiter: [seq, payload] or [topic, seq, payload].
      const size_t at = frames.size() == 3 ? 1 : frames.size() == 4 ? 2 : 0;
      if (at == 0 || !frames[0].empty() || frames[at].size() != 8) {
        Malformed(fmt::format("a replay message of {} frames (want \"\", [topic,] seq, payload)",
                              frames.size()));
        continue;
      }
      const uint64_t seq = BigEndian64(frames[at]);
      if (seq == kEndOfReplay || frames[at + 1].empty()) {
        sequencer_.OnReplayEnd();
      } else {
        sequencer_.OnReplay(seq, frames[at + 1].to_string_view());
      }
    }
    out_ = nullptr;
  }

  void Tick(Nanos now, std::vector<EngineUpdate>& out) {
    out_ = &out;
    sequencer_.OnTick(now);
    out_ = nullptr;
    double blocks = 0;
    for (const auto& [rank, map] : maps_) blocks += static_cast<double>(map->blocks());
    metrics_.blocks->Set(blocks);
  }

  // The full state of `node` (one of this engine's instances), if it is one.
  bool SnapshotOf(const std::string& node, std::vector<EngineUpdate>& out) const {
    for (const auto& [rank, map] : maps_) {
      if (NodeName(rank) != node) continue;
      out.push_back(EngineUpdate{.kind = EngineUpdate::Kind::kSnapshot,
                                 .node = node,
                                 .salt_scope = source_.salt_scope,
                                 .blocks = map->Snapshot()});
      return true;
    }
    return false;
  }

  void Leave(std::vector<EngineUpdate>& out) const {
    for (const auto& [rank, map] : maps_) {
      out.push_back(EngineUpdate{.kind = EngineUpdate::Kind::kLeave, .node = NodeName(rank)});
    }
  }

  // EngineSequencerSink:
  void Deliver(uint64_t /*seq*/, std::string_view payload) override {
    Result<EngineEventBatch> batch = DecodeEngineEvents(
        std::span(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()),
        {.max_payload_bytes = options_.max_message_bytes});
    if (!batch.ok()) {
      Malformed(batch.status().message());
      return;
    }
    const uint32_t rank = batch->dp_rank.value_or(0);
    EngineBlockMap& map = MapOf(rank);
    const uint64_t unknown_before = map.stats().unknown_parent;
    EngineUpdate& update = UpdateFor(rank);
    for (const EngineEvent& event : batch->events) {
      if (std::holds_alternative<EngineBlockStored>(event)) metrics_.stored->Inc();
      if (std::holds_alternative<EngineBlockRemoved>(event)) metrics_.removed->Inc();
      if (std::holds_alternative<EngineAllCleared>(event)) metrics_.cleared->Inc();
      map.Apply(event, update.events);
    }
    metrics_.unknown_parent->Inc(static_cast<double>(map.stats().unknown_parent - unknown_before));
    const double wall =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (batch->ts > 0) metrics_.lag->Set(wall - batch->ts);
  }

  void Clear(EngineClearReason reason) override {
    metrics_.clears[static_cast<size_t>(reason)]->Inc();
    spdlog::warn("engine {}: its blocks leave the index ({})", source_.name,
                 EngineClearReasonName(reason));
    for (auto& [rank, map] : maps_) {
      map->Clear();
      KvEvent cleared;
      cleared.kind = KvEvent::Kind::kCleared;
      UpdateFor(rank).events.push_back(std::move(cleared));
    }
  }

  void RequestReplay(uint64_t from) override {
    metrics_.gaps->Inc();
    metrics_.replays->Inc();
    if (!dealer_) return;
    std::array<zmq::message_t, 2> request{zmq::message_t(), BigEndianFrame(from)};
    if (!zmq::send_multipart(*dealer_, request, zmq::send_flags::dontwait)) {
      spdlog::warn("engine {}: the replay request could not be sent now", source_.name);
    }
  }

 private:
  std::string NodeName(uint32_t rank) const {
    return rank == 0 ? source_.name : fmt::format("{}/dp{}", source_.name, rank);
  }

  EngineBlockMap& MapOf(uint32_t rank) {
    auto it = maps_.find(rank);
    if (it == maps_.end()) {
      it = maps_
               .emplace(rank, std::make_unique<EngineBlockMap>(EngineBlockMap::Options{
                                  .space = source_.space,
                                  .format = source_.format,
                                  .max_blocks = options_.max_blocks_per_instance}))
               .first;
    }
    return *it->second;
  }

  EngineUpdate& UpdateFor(uint32_t rank) {
    const std::string node = NodeName(rank);
    if (out_->empty() || out_->back().kind != EngineUpdate::Kind::kEvents ||
        out_->back().node != node) {
      out_->push_back(EngineUpdate{.node = node, .salt_scope = source_.salt_scope});
    }
    return out_->back();
  }

  void Malformed(std::string_view what) {
    metrics_.decode_errors->Inc();
    const auto count = static_cast<uint64_t>(metrics_.decode_errors->Value());
    if (Sampled(count))
      spdlog::warn("engine {}: dropped {} (error {} of this engine)", source_.name, what, count);
  }

  EngineSource source_;
  const EngineFeedOptions& options_;
  EngineMetrics metrics_;
  EngineSequencer sequencer_;
  zmq::socket_t sub_;
  std::optional<zmq::socket_t> dealer_;
  std::map<uint32_t, std::unique_ptr<EngineBlockMap>> maps_;
  std::vector<EngineUpdate>* out_ = nullptr;  // where Deliver and Clear write, while reading
};

class EngineFeed::Impl {
 public:
  explicit Impl(EngineFeedOptions options) : options_(std::move(options)) {}
  ~Impl() { Stop(); }

  Status Start() {
    if (!options_.sink || options_.registry == nullptr)
      return InvalidArgumentError("EngineFeed needs a sink and a registry");
    KVTIER_RETURN_IF_ERROR(ValidateEngineSources(options_.engines));
    KVTIER_RETURN_IF_ERROR(families_.Register(*options_.registry));
    KVTIER_RETURN_IF_ERROR(Subscribe(options_.engines));
    thread_ = std::thread([this] { Run(); });
    return Status::Ok();
  }

  Status Reconfigure(std::vector<EngineSource> engines) {
    KVTIER_RETURN_IF_ERROR(ValidateEngineSources(engines));
    MutexLock lock(mu_);
    pending_ = std::move(engines);
    return Status::Ok();
  }

  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  // Opens the subscriptions of `engines` that are not open as they are; closes
  // the rest.
  Status Subscribe(const std::vector<EngineSource>& engines) {
    std::vector<std::unique_ptr<Subscription>> next;
    for (const EngineSource& source : engines) {
      auto same = std::find_if(subs_.begin(), subs_.end(),
                               [&](const auto& s) { return s && SameSource(s->source(), source); });
      if (same != subs_.end()) {
        next.push_back(std::move(*same));
        continue;
      }
      try {
        next.push_back(
            std::make_unique<Subscription>(context_, source, options_, families_.For(source.name)));
      } catch (const zmq::error_t& e) {
        return InvalidArgumentError(fmt::format("engine \"{}\": cannot connect to {} or {}: {}",
                                                source.name, source.events, source.replay,
                                                e.what()));
      }
      spdlog::info("engine {} ({}): subscribed to {}{}", source.name,
                   EngineFormatName(source.format), source.events,
                   source.replay.empty() ? "" : " with replay " + source.replay);
    }
    for (auto& old : subs_) {
      if (old) old->Leave(updates_);
    }
    subs_ = std::move(next);
    return Status::Ok();
  }

  void Run() {
    NameThisThread("kvt-engines");
    while (!stop_) {
      TakeNewConfiguration();
      std::vector<zmq::pollitem_t> items;
      for (auto& s : subs_) {
        items.push_back({s->sub().handle(), 0, ZMQ_POLLIN, 0});
        if (zmq::socket_t* d = s->dealer()) items.push_back({d->handle(), 0, ZMQ_POLLIN, 0});
      }
      if (items.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      } else {
        try {
          zmq::poll(items, std::chrono::milliseconds(50));
        } catch (const zmq::error_t& e) {
          spdlog::warn("engine feed: poll failed: {}", e.what());
        }
      }
      const Nanos now = options_.clock->Now();
      for (auto& s : subs_) {
        s->ReadReplay(updates_);
        s->ReadLive(now, updates_);
        s->Tick(now, updates_);
      }
      Flush();
    }
  }

  void TakeNewConfiguration() {
    std::optional<std::vector<EngineSource>> engines;
    {
      MutexLock lock(mu_);
      engines.swap(pending_);
    }
    if (!engines) return;
    if (Status s = Subscribe(*engines); !s.ok())
      spdlog::warn("engine feed: new configuration not applied: {}", s.ToString());
  }

  // Hands the updates to the sink; answers its snapshot requests at once.
  void Flush() {
    for (int round = 0; round < 3 && !updates_.empty(); ++round) {
      std::vector<std::string> resync = options_.sink(updates_);
      updates_.clear();
      for (const std::string& node : resync) {
        for (auto& s : subs_) {
          if (s->SnapshotOf(node, updates_)) break;
        }
      }
    }
    updates_.clear();
  }

  EngineFeedOptions options_;
  MetricFamilies families_;
  zmq::context_t context_{1};
  std::vector<std::unique_ptr<Subscription>> subs_;  // the feed thread's after Start()
  std::vector<EngineUpdate> updates_;
  Mutex mu_;
  std::optional<std::vector<EngineSource>> pending_ KVTIER_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

Result<std::unique_ptr<EngineFeed>> EngineFeed::Create(EngineFeedOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  KVTIER_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<EngineFeed>(new EngineFeed(std::move(impl)));
}

EngineFeed::EngineFeed(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EngineFeed::~EngineFeed() { impl_->Stop(); }
Status EngineFeed::Reconfigure(std::vector<EngineSource> engines) {
  return impl_->Reconfigure(std::move(engines));
}

}  // namespace kvtier::coordinator
