#include "services/bench/rpc/lookup_rpc_driver.h"

#include <algorithm>
#include <chrono>
#include <unordered_set>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include "common/block_key.h"
#include "services/bench/latency_stats.h"
#include "services/auth/token_store.h"
#include "services/coordinator/rpc/coordinator_node.h"
#include "services/rpc/buffered_message_stream.h"
#include "services/rpc/deferred_finish.h"
#include "services/rpc/schema/kvtier.capnp.h"
#include "services/rpc/status_mapping.h"

namespace kvtier::bench {
namespace {

using coordinator::CoordinatorNode;
using coordinator::CoordinatorNodeOptions;

namespace schema = kvtier::rpc::schema;
using SteadyClock = std::chrono::steady_clock;

constexpr size_t kEventsPerBatch = 512;

// The bench's end of the connection, on the calling thread's event loop, framed as the
// SDK's RpcClient frames it (rpc::BufferedMessageStream).
class BenchConnection {
 public:
  explicit BenchConnection(const std::string& address)
      : io_(kj::setupAsyncIo()),
        stream_(io_.provider->getNetwork()
                    .parseAddress(address)
                    .wait(io_.waitScope)
                    ->connect()
                    .wait(io_.waitScope)),
        messages_(*stream_),
        network_(messages_, capnp::rpc::twoparty::Side::CLIENT),
        rpc_(capnp::makeRpcClient(network_)) {
    capnp::MallocMessageBuilder message(8);
    auto server = message.initRoot<capnp::rpc::twoparty::VatId>();
    server.setSide(capnp::rpc::twoparty::Side::SERVER);
    bootstrap_ = rpc_.bootstrap(server).castAs<schema::Bootstrap>();
  }

  kj::WaitScope& waitScope() { return io_.waitScope; }

  schema::Coordinator::Client Connect(const std::string& token) {
    auto auth = bootstrap_.authenticateRequest();
    auth.setToken(token);
    auto session = auth.send().wait(io_.waitScope).getSession();
    return session.coordinatorRequest().send().wait(io_.waitScope).getCoordinator();
  }

 private:
  kj::AsyncIoContext io_;
  kj::Own<kj::AsyncIoStream> stream_;
  rpc::BufferedMessageStream messages_;
  capnp::TwoPartyVatNetwork network_;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc_;
  schema::Bootstrap::Client bootstrap_ = nullptr;
};

// Keys of `ids`, in `salt`'s key space: the identity for a tenant's lookups, which the
// coordinator salts; the tenant's own for the worker's announcements.
void SetKeys(capnp::List<schema::BlockKey>::Builder list, const OpaqueKeyNamespace& ns,
             const uint64_t* ids, const KeySalt& salt = {}) {
  for (unsigned i = 0; i < list.size(); ++i) {
    const BlockKey key = salt.Apply(ns.Key(ids[i]));
    list[i].setHi(key.hi);
    list[i].setLo(key.lo);
  }
}

// A worker announces every block of the trace as chains continuing what it already stored.
uint64_t LoadTrace(BenchConnection& client, schema::Coordinator::Client& coordinator,
                   const std::vector<std::vector<uint64_t>>& prompts, std::string_view salt) {
  const uint64_t salt_scope = SaltScope(salt);
  const KeySalt keys(salt);
  auto& ws = client.waitScope();
  auto reg = coordinator.registerRequest();
  reg.initNode().setNodeId("bench-worker");
  reg.getNode().setIncarnation(1);
  reg.send().wait(ws);
  auto snapshot = coordinator.publishSnapshotRequest();
  snapshot.initSnapshot().setNodeId("bench-worker");
  snapshot.getSnapshot().setIncarnation(1);
  snapshot.getSnapshot().setLast(true);
  snapshot.send().wait(ws);

  const OpaqueKeyNamespace ns("mooncake", "");
  std::unordered_set<uint64_t> stored;
  uint64_t sequence = 0;
  for (size_t first = 0; first < prompts.size(); first += kEventsPerBatch) {
    const size_t last = std::min(prompts.size(), first + kEventsPerBatch);
    std::vector<size_t> fresh_from;  // per prompt: the first id not stored yet
    for (size_t p = first; p < last; ++p) {
      size_t prefix = 0;
      while (prefix < prompts[p].size() && stored.count(prompts[p][prefix])) ++prefix;
      fresh_from.push_back(prefix);
      for (size_t i = prefix; i < prompts[p].size(); ++i) stored.insert(prompts[p][i]);
    }
    auto publish = coordinator.publishEventsRequest();
    auto batch = publish.initBatch();
    batch.setNodeId("bench-worker");
    batch.setIncarnation(1);
    batch.setFirstSequence(sequence);
    size_t events = 0;
    for (size_t p = first; p < last; ++p) events += fresh_from[p - first] < prompts[p].size();
    auto list = batch.initEvents(static_cast<unsigned>(events));
    unsigned e = 0;
    for (size_t p = first; p < last; ++p) {
      const size_t prefix = fresh_from[p - first];
      if (prefix == prompts[p].size()) continue;
      auto event = list[e++].initStored();
      event.setSaltScope(salt_scope);
      if (prefix > 0) {
        event.setHasParent(true);
        const BlockKey parent = keys.Apply(ns.Key(prompts[p][prefix - 1]));
        event.initParentKey().setHi(parent.hi);
        event.getParentKey().setLo(parent.lo);
      }
      SetKeys(event.initKeys(static_cast<unsigned>(prompts[p].size() - prefix)), ns,
              prompts[p].data() + prefix, keys);
    }
    publish.send().wait(ws);
    sequence += events;
  }
  return stored.size();
}

// What the answers carried: matched blocks, their locations (either form) and bytes.
struct AnswerTotals {
  uint64_t matched = 0, locations = 0, bytes = 0;

  void Add(schema::LookupResult::Reader answer, uint64_t answer_bytes) {
    matched += answer.getMatchedBlocks();
    locations += answer.getLocations().size();
    for (const auto block : answer.getBlocks()) locations += block.getLocations().size();
    bytes += answer_bytes;
  }
};

// Sends the lookups open loop and returns each call's latency from its scheduled time.
std::vector<double> SendAtRate(BenchConnection& client, schema::Coordinator::Client& coordinator,
                               const LookupRpcBenchOptions& options, LookupRpcBenchResult& result,
                               AnswerTotals& totals) {
  auto& ws = client.waitScope();
  const OpaqueKeyNamespace ns("mooncake", "");
  const auto total = static_cast<uint64_t>(options.rate_per_sec * options.seconds);
  const auto interval = std::chrono::duration<double>(1.0 / options.rate_per_sec);
  std::vector<double> latencies_us;
  latencies_us.reserve(total);
  std::vector<kj::Promise<void>> in_flight;  // kept until the end: a few hundred KB
  in_flight.reserve(total);
  uint64_t done = 0;
  // Each answer's Finish follows the next Call instead of travelling alone, as the SDK's
  // client sends them: one server wake-up per call instead of two.
  rpc::DeferredFinish deferred;
  const auto start = SteadyClock::now();
  const auto give_up = start + std::chrono::duration_cast<SteadyClock::duration>(
                                   std::chrono::duration<double>(options.seconds + 10.0));
  for (uint64_t sent = 0; sent < total || done < sent;) {
    const auto now = SteadyClock::now();
    if (now > give_up) {
      result.errors += sent - done;  // answers that never came
      break;
    }
    while (sent < total &&
           start + std::chrono::duration_cast<SteadyClock::duration>(interval * sent) <= now) {
      const auto scheduled =
          start + std::chrono::duration_cast<SteadyClock::duration>(interval * sent);
      const std::vector<uint64_t>& prompt = options.prompts[sent % options.prompts.size()];
      auto request = coordinator.lookupRequest();
      auto body = request.initRequest();
      SetKeys(body.initKeys(static_cast<unsigned>(prompt.size())), ns, prompt.data());
      body.setCompactLocations(options.compact_answers);
      in_flight.push_back(
          request.send()
              .then(
                  [&, scheduled](auto response) {
                    latencies_us.push_back(
                        std::chrono::duration<double, std::micro>(SteadyClock::now() - scheduled)
                            .count());
                    totals.Add(response.getResult(),
                               response.totalSize().wordCount * sizeof(capnp::word));
                    ++done;
                    deferred.Keep(kj::mv(response));
                  },
                  [&](kj::Exception&&) {
                    ++result.errors;
                    ++done;
                  })
              .eagerlyEvaluate(nullptr));  // KJ promises are lazy: run the continuation on arrival
      ++sent;
      deferred.CallSent();
    }
    if (sent == total) deferred.CallSent();  // no call left to carry them
    ws.poll();
  }
  return latencies_us;
}

}  // namespace

Result<LookupRpcBenchResult> RunLookupRpcBench(const LookupRpcBenchOptions& options) {
  if (options.prompts.empty()) return InvalidArgumentError("the trace has no requests");
  if (!(options.rate_per_sec > 0) || !(options.seconds > 0)) {
    return InvalidArgumentError("--rate and --seconds must be positive");
  }
  // A tenant that looks up, and a node credential that loads the trace's blocks.
  const std::string token = auth::GenerateToken();
  const std::string node_token = auth::GenerateToken();
  MetricsRegistry registry;
  CoordinatorNodeOptions node_options;
  node_options.rpc.listen = {"127.0.0.1:0"};
  node_options.rpc.busy_poll_us = options.busy_poll_us;
  KVTIER_ASSIGN_OR_RETURN(
      node_options.tokens,
      auth::TokenStore::FromYaml(
          "tenants:\n  - {name: bench, token: " + token +
              ", salt: bench-salt}\nnodes:\n  - {name: bench-node, token: " + node_token + "}\n",
          "the bench's tokens"));
  node_options.registry = &registry;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorNode> node,
                          CoordinatorNode::Create(std::move(node_options)));

  LookupRpcBenchResult result;
  auto client = std::make_unique<BenchConnection>(node->endpoints()[0]);
  schema::Coordinator::Client loader = client->Connect(node_token);
  result.indexed_blocks = LoadTrace(*client, loader, options.prompts, "bench-salt");
  schema::Coordinator::Client coordinator = client->Connect(token);

  const auto start = SteadyClock::now();
  const OtherThreadsUsage server_before = OtherThreadsUsage::Now();
  AnswerTotals totals;
  std::vector<double> latencies_us = SendAtRate(*client, coordinator, options, result, totals);
  const OtherThreadsUsage server_after = OtherThreadsUsage::Now();
  const double elapsed = std::chrono::duration<double>(SteadyClock::now() - start).count();
  node->Shutdown();

  std::sort(latencies_us.begin(), latencies_us.end());
  result.calls = latencies_us.size();
  result.achieved_rate = static_cast<double>(result.calls) / elapsed;
  result.p50_us = Percentile(latencies_us, 0.50);
  result.p90_us = Percentile(latencies_us, 0.90);
  result.p99_us = Percentile(latencies_us, 0.99);
  result.p999_us = Percentile(latencies_us, 0.999);
  result.max_us = latencies_us.empty() ? 0 : latencies_us.back();
  const auto per_call = [&](uint64_t total) {
    return result.calls == 0 ? 0 : static_cast<double>(total) / static_cast<double>(result.calls);
  };
  result.mean_matched_blocks = per_call(totals.matched);
  result.mean_locations = per_call(totals.locations);
  result.mean_answer_bytes = per_call(totals.bytes);
  result.server_switches_per_call = per_call(
      static_cast<uint64_t>(server_after.voluntary_switches - server_before.voluntary_switches));
  result.server_cpu_us_per_call = 1e6 * (server_after.cpu_seconds - server_before.cpu_seconds) /
                                  static_cast<double>(std::max<uint64_t>(result.calls, 1));
  return result;
}

}  // namespace kvtier::bench
