#include "services/rpc/gcc_kj_workaround.h"  // first: before any KJ header
#include "services/cli/bench_lookup_http.h"

#include <kj/async-io.h>
#include <kj/compat/http.h>
#include <kj/debug.h>

#include <chrono>
#include <deque>
#include <memory>
#include <thread>
#include <zmq.hpp>

#include "common/metrics.h"
#include "services/auth/token_store.h"
#include "services/bench/engine_fleet.h"
#include "services/bench/latency_stats.h"
#include "services/cli/embedded_cluster.h"
#include "services/cli/engine_publisher.h"
#include "services/coordinator/rpc/routing_client.h"

namespace kvtier::cli {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr uint32_t kTokensPerBlock = 16;
constexpr auto kFollowTimeout = std::chrono::seconds(10);

// Prompt p's blocks: its full ones, then the one its last tokens start (if any).
std::vector<uint64_t> PromptIds(uint32_t prompt, uint32_t tokens, bool partial) {
  std::vector<uint64_t> ids;
  const uint32_t blocks = (tokens + (partial ? kTokensPerBlock - 1 : 0)) / kTokensPerBlock;
  for (uint32_t b = 0; b < blocks; ++b) ids.push_back((uint64_t{prompt} << 32) | b);
  return ids;
}

std::vector<uint32_t> PromptTokens(uint32_t prompt, uint32_t tokens) {
  std::vector<uint32_t> out =
      bench::SyntheticPrompt(PromptIds(prompt, tokens, /*partial=*/true), kTokensPerBlock);
  out.resize(tokens);
  return out;
}

std::string Body(const std::vector<uint32_t>& tokens) {
  std::string body = "{\"tokens\": [";
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) body += ",";
    body += std::to_string(tokens[i]);
  }
  return body + "], \"model\": \"bench\"}";
}

// An embedded coordinator following one engine that holds every prompt.
class BenchCluster {
 public:
  Status Start(const LookupHttpBenchOptions& options, const std::string& token) {
    EmbeddedClusterOptions cluster;
    cluster.registry = &registry_;
    cluster.local_node = false;
    cluster.config.coordinator.listen = {"127.0.0.1:0"};
    cluster.config.coordinator.http_listen = {"127.0.0.1:0"};
    cluster.config.coordinator.engines.push_back({.name = "engine-0",
                                                  .events = publisher_.endpoint(),
                                                  .tokens_per_block = kTokensPerBlock,
                                                  .tenant = "bench",
                                                  .model = "bench"});
    KVTIER_ASSIGN_OR_RETURN(
        cluster.tokens,
        auth::TokenStore::FromYaml(
            "tenants:\n  - {name: bench, token: " + token + ", salt: bench-salt}\n",
            "the bench's tokens"));
    KVTIER_ASSIGN_OR_RETURN(cluster_, EmbeddedCluster::Create(std::move(cluster)));
    if (cluster_->http_endpoints().empty()) return InternalError("the routing API is off");
    address_ = cluster_->http_endpoints().front();
    KVTIER_RETURN_IF_ERROR(publisher_.WaitForSubscriber(kFollowTimeout));
    bench::SimulatedEngine engine(size_t{options.prompts} * (options.tokens / kTokensPerBlock + 1));
    for (uint32_t p = 0; p < options.prompts; ++p) {
      publisher_.Publish(bench::EncodeEventBatch(
          engine.Serve(PromptIds(p, options.tokens, /*partial=*/false)), kTokensPerBlock,
          bench::EventWire::kArray, 0.0));
    }
    return WaitUntilIndexed(options, token);
  }

  const std::string& address() const { return address_; }  // host:port of the routing API

 private:
  // Until the last prompt's lookup names the engine with its whole prompt.
  Status WaitUntilIndexed(const LookupHttpBenchOptions& options, const std::string& token) {
    const coordinator::RoutingClientOptions client{.url = "http://" + address_, .token = token};
    const coordinator::RoutingQuery query{.tokens = PromptTokens(options.prompts - 1, options.tokens),
                                          .model = "bench"};
    const uint32_t expected = options.tokens / kTokensPerBlock * kTokensPerBlock;
    const auto deadline = SteadyClock::now() + kFollowTimeout;
    while (true) {
      KVTIER_ASSIGN_OR_RETURN(auto instances, coordinator::Lookup(client, query));
      if (!instances.empty() && instances.front().prefix_tokens == expected) return Status::Ok();
      if (SteadyClock::now() > deadline)
        return UnavailableError("the coordinator did not show the engine's prompts in time");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  MetricsRegistry registry_;
  zmq::context_t context_{1};
  EnginePublisher publisher_{context_};
  std::unique_ptr<EmbeddedCluster> cluster_;  // after the publisher: it goes first
  std::string address_;
};

// The gateway's side: keep-alive connections on the calling thread's event loop.
class LoadGenerator {
 public:
  LoadGenerator(const LookupHttpBenchOptions& options, const std::string& address,
                const std::string& token)
      : options_(options),
        io_(kj::setupAsyncIo()),
        path_(options.route ? "/v1/route" : "/v1/lookup"),
        host_(address),
        authorization_("Bearer " + token) {
    for (uint32_t p = 0; p < options.prompts; ++p)
      bodies_.push_back(Body(PromptTokens(p, options.tokens)));
    address_ = io_.provider->getNetwork().parseAddress(address.c_str()).wait(io_.waitScope);
    for (uint32_t c = 0; c < options.connections; ++c) {
      connections_.push_back(std::make_unique<Connection>());
      Connect(*connections_.back());
    }
  }

  // Sends at the rate and returns each answered call's latency from its scheduled time.
  std::vector<double> Run(LookupHttpBenchResult& result) {
    const auto total = static_cast<uint64_t>(options_.rate_per_sec * options_.seconds);
    const auto interval = std::chrono::duration<double>(1.0 / options_.rate_per_sec);
    latencies_us_.reserve(total);
    const auto start = SteadyClock::now();
    const auto give_up = start + std::chrono::duration_cast<SteadyClock::duration>(
                                     std::chrono::duration<double>(options_.seconds + 10.0));
    uint64_t scheduled = 0;
    while (scheduled < total || finished_ < scheduled) {
      const auto now = SteadyClock::now();
      if (now > give_up) {
        errors_ += scheduled - finished_;  // answers that never came
        break;
      }
      while (scheduled < total &&
             start + std::chrono::duration_cast<SteadyClock::duration>(interval * scheduled) <= now) {
        due_.push_back(start +
                       std::chrono::duration_cast<SteadyClock::duration>(interval * scheduled));
        ++scheduled;
      }
      // Round robin from where the last call went, so that every connection stays in use
      // (an idle one is closed by the server after its keep-alive timeout).
      for (size_t tried = 0; tried < connections_.size() && !due_.empty(); ++tried) {
        Connection& c = *connections_[next_];
        next_ = (next_ + 1) % connections_.size();
        if (c.busy) continue;
        Send(c, due_.front(), scheduled - due_.size());
        due_.pop_front();
      }
      io_.waitScope.poll();
    }
    result.errors = errors_;
    result.matched_tokens = last_matched_;
    return std::move(latencies_us_);
  }

 private:
  struct Connection {
    kj::Own<kj::AsyncIoStream> stream;
    kj::Own<kj::HttpClient> client;
    bool busy = false;
    kj::Promise<void> call = nullptr;
  };

  void Connect(Connection& c) {
    c.client = nullptr;
    c.stream = address_->connect().wait(io_.waitScope);
    c.client = kj::newHttpClient(table_, *c.stream);
  }

  void Send(Connection& c, SteadyClock::time_point scheduled, uint64_t n) {
    const std::string& body = bodies_[n % bodies_.size()];
    kj::HttpHeaders headers(table_);
    headers.set(kj::HttpHeaderId::HOST, host_.c_str());
    headers.set(kj::HttpHeaderId::CONTENT_TYPE, "application/json");
    headers.add("Authorization", authorization_.c_str());
    // A connection the server closed is opened again once; a call that cannot start is an
    // error (KJ's exceptions stop here).
    kj::Maybe<kj::HttpClient::Request> started;
    for (int attempt = 0; attempt < 2 && started == nullptr; ++attempt) {
      KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
                     if (attempt > 0) Connect(c);
                     started = c.client->request(kj::HttpMethod::POST, path_, headers, body.size());
                   })) {
        (void)e;
      }
    }
    if (started == nullptr) {
      ++errors_;
      ++finished_;
      return;
    }
    kj::HttpClient::Request request = kj::mv(KJ_ASSERT_NONNULL(started));
    c.busy = true;
    auto written = request.body->write(body.data(), body.size()).attach(kj::mv(request.body));
    c.call = written.then([response = kj::mv(request.response)]() mutable { return kj::mv(response); })
                 .then([](kj::HttpClient::Response&& r) {
                   const unsigned status = r.statusCode;
                   return r.body->readAllText().attach(kj::mv(r.body)).then(
                       [status](kj::String text) { return std::make_pair(status, kj::mv(text)); });
                 })
                 .then(
                     [this, &c, scheduled](std::pair<unsigned, kj::String> answer) {
                       Finish(c);
                       if (answer.first != 200) {
                         ++errors_;
                         return;
                       }
                       latencies_us_.push_back(std::chrono::duration<double, std::micro>(
                                                   SteadyClock::now() - scheduled)
                                                   .count());
                       last_matched_ = MatchedTokens(answer.second);
                     },
                     [this, &c](kj::Exception&&) {
                       Finish(c);
                       ++errors_;
                     })
                 .eagerlyEvaluate(nullptr);
  }

  void Finish(Connection& c) {
    c.busy = false;
    ++finished_;
  }

  // The first "prefix_tokens" of an answer: the engine's (it is the only instance).
  static uint32_t MatchedTokens(const kj::String& answer) {
    const std::string_view text(answer.cStr());
    const size_t at = text.find("\"prefix_tokens\":");
    if (at == std::string_view::npos) return 0;
    return static_cast<uint32_t>(std::strtoul(text.data() + at + 16, nullptr, 10));
  }

  const LookupHttpBenchOptions options_;
  kj::AsyncIoContext io_;
  kj::HttpHeaderTable table_;
  const std::string path_;
  const std::string host_;
  const std::string authorization_;
  std::vector<std::string> bodies_;
  kj::Own<kj::NetworkAddress> address_;
  std::vector<std::unique_ptr<Connection>> connections_;
  size_t next_ = 0;  // the connection the next call tries first
  std::deque<SteadyClock::time_point> due_;  // scheduled calls waiting for a connection
  std::vector<double> latencies_us_;
  uint64_t finished_ = 0;
  uint64_t errors_ = 0;
  uint32_t last_matched_ = 0;
};

}  // namespace

Result<LookupHttpBenchResult> RunLookupHttpBench(const LookupHttpBenchOptions& options) {
  if (options.tokens < kTokensPerBlock)
    return InvalidArgumentError("--tokens must be at least " + std::to_string(kTokensPerBlock));
  if (options.prompts == 0 || options.connections == 0)
    return InvalidArgumentError("--prompts and --connections must be positive");
  if (!(options.rate_per_sec > 0) || !(options.seconds > 0))
    return InvalidArgumentError("--rate and --seconds must be positive");
  const std::string token = auth::GenerateToken();
  BenchCluster cluster;
  KVTIER_RETURN_IF_ERROR(cluster.Start(options, token));
  std::unique_ptr<LoadGenerator> load;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
                 load = std::make_unique<LoadGenerator>(options, cluster.address(), token);
               })) {
    return UnavailableError("connecting to the routing API at " + cluster.address() + ": " +
                            e->getDescription().cStr());
  }

  LookupHttpBenchResult result;
  const auto start = SteadyClock::now();
  const bench::OtherThreadsUsage before = bench::OtherThreadsUsage::Now();
  std::vector<double> latencies_us = load->Run(result);
  const bench::OtherThreadsUsage after = bench::OtherThreadsUsage::Now();
  const double elapsed = std::chrono::duration<double>(SteadyClock::now() - start).count();
  result.calls = latencies_us.size();
  result.achieved_rate = static_cast<double>(result.calls) / elapsed;
  result.p50_us = bench::Percentile(latencies_us, 0.50);
  result.p90_us = bench::Percentile(latencies_us, 0.90);
  result.p99_us = bench::Percentile(latencies_us, 0.99);
  result.p999_us = bench::Percentile(latencies_us, 0.999);
  result.max_us = bench::Percentile(latencies_us, 1.0);
  result.server_cpu_us_per_call = 1e6 * (after.cpu_seconds - before.cpu_seconds) /
                                  static_cast<double>(std::max<uint64_t>(result.calls, 1));
  return result;
}

}  // namespace kvtier::cli
