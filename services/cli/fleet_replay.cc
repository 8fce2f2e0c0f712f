#include "services/cli/fleet_replay.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <zmq.hpp>

#include "common/metrics.h"
#include "services/bench/engine_fleet.h"
#include "services/bench/latency_stats.h"
#include "services/cli/embedded_cluster.h"
#include "services/cli/engine_publisher.h"
#include "services/coordinator/engines/engine_event.h"
#include "services/coordinator/rpc/routing_client.h"

namespace kvtier::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kFollowTimeout = std::chrono::seconds(10);

std::string EngineName(uint32_t i) { return "engine-" + std::to_string(i); }

uint64_t EventCount(const bench::EngineStep& step) {
  uint64_t n = step.removed.size();
  for (const bench::StoredRun& run : step.stored) n += run.blocks.size();
  return n;
}


// The routed run: a coordinator following N publishing engines, asked where each request goes.
class RoutedFleet {
 public:
  static Result<std::unique_ptr<RoutedFleet>> Create(const FleetReplayOptions& options) {
    auto fleet = std::unique_ptr<RoutedFleet>(new RoutedFleet(options));
    KVTIER_RETURN_IF_ERROR(fleet->Start());
    return fleet;
  }

  Status Serve(const bench::TraceRequest& request, FleetReplayReport& report,
               std::vector<double>& route_us) {
    const std::vector<uint32_t> tokens = bench::SyntheticPrompt(request.hash_ids, options_.block_tokens);
    coordinator::RoutingQuery query{.tokens = tokens, .candidates = names_};
    // Decode 0: every engine idle, said so (the coordinator's own count of its routes,
    // which stands in for loads no one gives, stays out of it).
    query.candidate_active_blocks = options_.decode_ms_per_token > 0
                                        ? Loads(request)
                                        : std::vector<uint32_t>(options_.engines, 0);
    const auto start = Clock::now();
    KVTIER_ASSIGN_OR_RETURN(coordinator::RouteDecision decision,
                            coordinator::Route(routing_, query));
    route_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    const uint32_t e = EngineIndex(decision.instance);
    if (e >= engines_.size()) {
      return InternalError("/v1/route chose \"" + decision.instance + "\", not an engine");
    }
    running_[e].push_back(
        {request.timestamp_ms + options_.decode_ms_per_token * request.output_length,
         static_cast<uint32_t>(request.hash_ids.size())});
    const bench::EngineStep step = engines_[e].Serve(request.hash_ids);
    report.routed_hit_blocks += step.hit_blocks;
    ++report.routed_requests_per_engine[e];
    if (step.stored.empty() && step.removed.empty()) return Status::Ok();
    publishers_[e]->Publish(bench::EncodeEventBatch(step, options_.block_tokens, wire_, 0.0));
    report.events += EventCount(step);
    ++report.messages;
    return WaitUntilIndexed(e, request, tokens);
  }

 private:
  explicit RoutedFleet(const FleetReplayOptions& options)
      : options_(options),
        wire_(options.format == "sglang" ? bench::EventWire::kMap : bench::EventWire::kArray),
        engines_(options.engines, bench::SimulatedEngine(options.engine_blocks)),
        running_(options.engines) {
    for (uint32_t i = 0; i < options.engines; ++i) names_.push_back(EngineName(i));
  }

  // Each engine's running blocks when `request` arrives (those that ended are dropped).
  std::vector<uint32_t> Loads(const bench::TraceRequest& request) {
    std::vector<uint32_t> loads;
    for (std::vector<Running>& engine : running_) {
      std::erase_if(engine, [&](const Running& r) { return r.until_ms <= request.timestamp_ms; });
      uint32_t blocks = 0;
      for (const Running& r : engine) blocks += r.blocks;
      loads.push_back(blocks);
    }
    return loads;
  }

  Status Start() {
    EmbeddedClusterOptions cluster;
    cluster.registry = &registry_;
    cluster.local_node = false;
    cluster.config.coordinator.listen = {"127.0.0.1:0"};
    cluster.config.coordinator.http_listen = {"127.0.0.1:0"};
    cluster.config.coordinator.sdk_tokens_per_block = 0;  // only the engines' keys
    cluster.config.coordinator.overlap_weight = options_.overlap_weight;
    for (uint32_t i = 0; i < options_.engines; ++i) {
      publishers_.push_back(std::make_unique<EnginePublisher>(context_));
      cluster.config.coordinator.engines.push_back({.name = EngineName(i),
                                                    .events = publishers_.back()->endpoint(),
                                                    .format = options_.format,
                                                    .tokens_per_block = options_.block_tokens});
    }
    KVTIER_ASSIGN_OR_RETURN(cluster_, EmbeddedCluster::Create(std::move(cluster)));
    if (cluster_->http_endpoints().empty()) return InternalError("the routing API is off");
    routing_.url = "http://" + cluster_->http_endpoints().front();
    routing_.token = "auth is off";
    // Each engine announces itself with AllBlocksCleared, as an engine does at a reset.
    for (auto& publisher : publishers_) {
      KVTIER_RETURN_IF_ERROR(publisher->WaitForSubscriber(kFollowTimeout));
      bench::EngineStep cleared;
      cleared.cleared = true;
      publisher->Publish(bench::EncodeEventBatch(cleared, 1, wire_, 0.0));
    }
    return WaitForEveryEngine();
  }

  Status WaitForEveryEngine() {
    const auto deadline = Clock::now() + kFollowTimeout;
    const std::vector<uint32_t> probe(options_.block_tokens, 0);
    while (true) {
      Result<coordinator::RouteDecision> d = coordinator::Route(routing_, {.tokens = probe});
      if (d.ok() && d->candidates.size() == options_.engines) return Status::Ok();
      if (Clock::now() > deadline) {
        return UnavailableError("the coordinator does not route to all " +
                                std::to_string(options_.engines) + " engines: " +
                                (d.ok() ? std::to_string(d->candidates.size()) + " are candidates"
                                        : d.status().ToString()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  uint32_t EngineIndex(const std::string& instance) const {
    for (uint32_t i = 0; i < options_.engines; ++i) {
      if (instance == EngineName(i)) return i;
    }
    return options_.engines;
  }

  // Until /v1/lookup shows engine e holding the prompt's prefix the simulation says it holds.
  Status WaitUntilIndexed(uint32_t e, const bench::TraceRequest& request,
                          const std::vector<uint32_t>& tokens) {
    uint32_t held = 0;
    while (held < request.hash_ids.size() && engines_[e].Holds(request.hash_ids[held])) ++held;
    const uint32_t expected = held * options_.block_tokens;
    const auto deadline = Clock::now() + kFollowTimeout;
    while (true) {
      KVTIER_ASSIGN_OR_RETURN(std::vector<coordinator::InstancePrefixTokens> instances,
                              coordinator::Lookup(routing_, {.tokens = tokens}));
      uint32_t shown = 0;
      for (const auto& i : instances) {
        if (i.name == EngineName(e)) shown = i.prefix_tokens;
      }
      if (shown == expected) return Status::Ok();
      if (Clock::now() > deadline) {
        return UnavailableError("the coordinator shows " + EngineName(e) + " holding " +
                                std::to_string(shown) + " tokens of a prompt, not " +
                                std::to_string(expected));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  struct Running {
    double until_ms;
    uint32_t blocks;
  };

  FleetReplayOptions options_;
  bench::EventWire wire_;
  std::vector<bench::SimulatedEngine> engines_;
  std::vector<std::string> names_;
  std::vector<std::vector<Running>> running_;  // per engine: the requests it runs
  MetricsRegistry registry_;
  zmq::context_t context_{1};
  std::vector<std::unique_ptr<EnginePublisher>> publishers_;
  std::unique_ptr<EmbeddedCluster> cluster_;  // after the publishers: it goes first
  coordinator::RoutingClientOptions routing_;
};

uint64_t RoundRobinHits(std::span<const bench::TraceRequest> requests,
                        const FleetReplayOptions& options) {
  std::vector<bench::SimulatedEngine> engines(options.engines,
                                              bench::SimulatedEngine(options.engine_blocks));
  uint64_t hits = 0;
  for (size_t i = 0; i < requests.size(); ++i)
    hits += engines[i % options.engines].Serve(requests[i].hash_ids).hit_blocks;
  return hits;
}

uint64_t BoundHits(std::span<const bench::TraceRequest> requests) {
  bench::SimulatedEngine never_forgets(SIZE_MAX);
  uint64_t hits = 0;
  for (const bench::TraceRequest& r : requests) hits += never_forgets.Serve(r.hash_ids).hit_blocks;
  return hits;
}

}  // namespace

Result<FleetReplayReport> RunFleetReplay(std::span<const bench::TraceRequest> requests,
                                         const FleetReplayOptions& options) {
  if (options.engines == 0) return InvalidArgumentError("--engines must be at least 1");
  if (options.engine_blocks == 0) return InvalidArgumentError("--engine-blocks must be at least 1");
  if (!(options.decode_ms_per_token >= 0))
    return InvalidArgumentError("--engine-decode-ms must not be negative");
  if (options.block_tokens == 0)
    return InvalidArgumentError("--engine-block-tokens must be at least 1");
  if (!(options.overlap_weight >= 0 && options.overlap_weight <= 1000))
    return InvalidArgumentError("--overlap-weight must be in [0, 1000]");
  KVTIER_RETURN_IF_ERROR(
      coordinator::ParseEngineFormat(options.format).status().WithContext("--engine-format"));
  FleetReplayReport report;
  report.engines = options.engines;
  report.engine_blocks = options.engine_blocks;
  report.format = options.format;
  report.decode_ms_per_token = options.decode_ms_per_token;
  report.overlap_weight = options.overlap_weight;
  report.requests = requests.size();
  report.routed_requests_per_engine.assign(options.engines, 0);
  for (const bench::TraceRequest& r : requests) report.blocks += r.hash_ids.size();
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RoutedFleet> fleet, RoutedFleet::Create(options));
  std::vector<double> route_us;
  route_us.reserve(requests.size());
  const auto start = Clock::now();
  for (size_t i = 0; i < requests.size(); ++i) {
    if (Status s = fleet->Serve(requests[i], report, route_us); !s.ok())
      return s.WithContext("request " + std::to_string(i + 1));
    if (options.progress) options.progress(i + 1, requests.size());
  }
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  report.route_p50_us = bench::Percentile(route_us, 0.50);
  report.route_p99_us = bench::Percentile(route_us, 0.99);
  report.round_robin_hit_blocks = RoundRobinHits(requests, options);
  report.bound_hit_blocks = BoundHits(requests);
  return report;
}

namespace {

std::string PerEngine(const FleetReplayReport& r) {
  std::string out;
  for (size_t i = 0; i < r.routed_requests_per_engine.size(); ++i)
    out += (i ? ", " : "") + std::to_string(r.routed_requests_per_engine[i]);
  return out;
}

double EventsPerSecond(const FleetReplayReport& r) {
  return r.seconds > 0 ? static_cast<double>(r.events) / r.seconds : 0.0;
}

}  // namespace

std::string FleetReportJson(const FleetReplayReport& r) {
  char buffer[1024];
  std::snprintf(
      buffer, sizeof(buffer),
      "{\"engines\": %u, \"engine_blocks\": %llu, \"engine_format\": \"%s\", "
      "\"decode_ms_per_token\": %g, \"overlap_weight\": %g, \"requests\": %llu, \"blocks\": %llu, "
      "\"routed_hit_rate\": %.6f, \"round_robin_hit_rate\": %.6f, \"unbounded_hit_rate\": %.6f, "
      "\"routed_requests_per_engine\": [%s], \"events\": %llu, \"messages\": %llu, "
      "\"seconds\": %.3f, \"events_per_second\": %.0f, \"route_p50_us\": %.1f, "
      "\"route_p99_us\": %.1f}",
      r.engines, static_cast<unsigned long long>(r.engine_blocks), r.format.c_str(),
      r.decode_ms_per_token, r.overlap_weight, static_cast<unsigned long long>(r.requests),
      static_cast<unsigned long long>(r.blocks), r.routed_hit_rate(), r.round_robin_hit_rate(),
      r.bound_hit_rate(), PerEngine(r).c_str(), static_cast<unsigned long long>(r.events),
      static_cast<unsigned long long>(r.messages), r.seconds, EventsPerSecond(r), r.route_p50_us,
      r.route_p99_us);
  return buffer;
}

std::string FleetReportText(const FleetReplayReport& r) {
  char buffer[1024];
  const double bound = r.bound_hit_rate();
  const auto of_bound = [&](double rate) { return bound > 0 ? 100.0 * rate / bound : 0.0; };
  std::snprintf(
      buffer, sizeof(buffer),
      "fleet: %u %s engines of %llu blocks, %llu requests, %llu blocks, %g ms per output token, "
      "overlap weight %g\n"
      "  routed (/v1/route)  hit rate %.4f  (%.1f%% of the unbounded bound %.4f); requests per "
      "engine %s\n"
      "  round robin         hit rate %.4f  (%.1f%%)\n"
      "  events              %llu block events in %llu messages, %.1f s "
      "(%.0f events/s, lock-step)\n"
      "  route               p50 %.1f us, p99 %.1f us\n",
      r.engines, r.format.c_str(), static_cast<unsigned long long>(r.engine_blocks),
      static_cast<unsigned long long>(r.requests), static_cast<unsigned long long>(r.blocks),
      r.decode_ms_per_token, r.overlap_weight, r.routed_hit_rate(), of_bound(r.routed_hit_rate()),
      bound, PerEngine(r).c_str(), r.round_robin_hit_rate(), of_bound(r.round_robin_hit_rate()),
      static_cast<unsigned long long>(r.events), static_cast<unsigned long long>(r.messages),
      r.seconds, EventsPerSecond(r), r.route_p50_us, r.route_p99_us);
  return buffer;
}

}  // namespace kvtier::cli
