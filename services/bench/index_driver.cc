#include "services/bench/index_driver.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>
#include <queue>

#include "storage/frequency_sketch.h"
#include "services/coordinator/index/block_index.h"
#include "services/coordinator/index/routing.h"

namespace kvtier::bench {
namespace {

using coordinator::BlockIndex;
using coordinator::NodeId;
using Clock = std::chrono::steady_clock;

struct PassResult {
  IndexBenchResult totals;
  std::vector<double> lookup_us;
};

// The requests each worker is running, by finish time: the load the router weighs.
class ActiveRequests {
 public:
  explicit ActiveRequests(uint32_t workers) {
    for (uint32_t n = 0; n < workers; ++n) loads_.push_back({static_cast<NodeId>(n), 0});
  }
  void AdvanceTo(double now_ms) {
    while (!running_.empty() && running_.top().end_ms <= now_ms) {
      loads_[running_.top().node].active_blocks -= running_.top().blocks;
      running_.pop();
    }
  }
  void Start(NodeId node, double end_ms, uint64_t blocks) {
    loads_[node].active_blocks += blocks;
    running_.push({end_ms, node, blocks});
  }
  const std::vector<coordinator::WorkerLoad>& loads() const { return loads_; }

 private:
  struct Running {
    double end_ms;
    NodeId node;
    uint64_t blocks;
    bool operator>(const Running& o) const { return end_ms > o.end_ms; }
  };
  std::vector<coordinator::WorkerLoad> loads_;
  std::priority_queue<Running, std::vector<Running>, std::greater<>> running_;
};

Result<PassResult> RunPass(const std::vector<TraceRequest>& trace,
                           const std::vector<std::vector<BlockKey>>& prompts,
                           const IndexBenchOptions& options) {
  coordinator::BlockIndexOptions index_options;
  index_options.expected_blocks = options.workers * options.gpu_blocks_per_worker;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<BlockIndex> index, BlockIndex::Create(index_options));
  for (NodeId node = 0; node < options.workers && options.window_blocks > 0; ++node) {
    const coordinator::PoolWindowSpec gpu_pool{{node, Tier::kGpu, 0},
                                               {options.window_blocks, options.sink_blocks}};
    KVTIER_RETURN_IF_ERROR(index->SetNodeWindows(node, std::span(&gpu_pool, 1)));
  }
  PassResult pass;
  IndexBenchResult& r = pass.totals;
  pass.lookup_us.reserve(prompts.size());
  uint64_t hit_blocks = 0;
  double index_seconds = 0.0;
  ActiveRequests active(options.workers);
  // Frequency admission into host memory: a block requested at least twice lately.
  KVTIER_ASSIGN_OR_RETURN(storage::FrequencySketch sketch, storage::FrequencySketch::Create({}));
  std::function<bool(const BlockKey&)> admit;
  if (options.frequency_admission)
    admit = [&sketch](const BlockKey& key) { return sketch.Estimate(key) >= 2; };
  std::vector<BlockKey> demoted;
  std::vector<BlockKey> onboard;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<BlockKey>& keys = prompts[i];
    active.AdvanceTo(static_cast<double>(trace[i].timestamp_ms));
    const auto start = Clock::now();
    const coordinator::LookupResult lookup = index->Lookup(0, keys);
    const auto looked_up = Clock::now();
    const coordinator::RouteChoice route =
        coordinator::ChooseWorker(lookup, {keys.size(), 0}, active.loads(), options.overlap_weight);
    const NodeId node = route.node;
    const uint32_t prefix = route.prefix_blocks;
    index->Touch(node, 0, keys);
    if (options.frequency_admission) {
      for (const BlockKey& key : keys) sketch.Record(key);
    }
    // Which prefix blocks the worker holds on its GPU, and which only in host memory. A
    // windowed pool needs only the sinks and the last window.
    onboard.clear();
    for (uint32_t b = 0; b < prefix; ++b) {
      if (options.window_blocks > 0 && b >= options.sink_blocks &&
          b + options.window_blocks < prefix)
        continue;
      bool on_gpu = false;
      for (const coordinator::Location& l : lookup.LocationsOf(b))
        on_gpu |= l.node == node && l.tier == Tier::kGpu;
      if (!on_gpu) onboard.push_back(keys[b]);
    }
    r.host_hit_blocks += onboard.size();
    r.gpu_hit_blocks += prefix - onboard.size();
    // The prefix is in use by this request (pinned on a real worker): only the rest of the
    // pool can make room, and a prompt longer than that keeps only what fits.
    const size_t capacity = options.gpu_blocks_per_worker;
    const size_t room = capacity - std::min<size_t>(prefix, capacity);
    const size_t fresh = std::min(keys.size() - prefix, room);
    const size_t needed = index->Held(node, Tier::kGpu) + onboard.size() + fresh;
    if (needed > capacity) {
      if (options.host_blocks_per_worker > 0) {
        demoted.clear();
        r.removed_blocks += index
                                ->Demote(node, Tier::kGpu, {node, Tier::kHost, 0},
                                         needed - capacity, admit, &demoted)
                                .size();
        r.offloaded_blocks += demoted.size();
        const size_t host_held = index->Held(node, Tier::kHost);
        if (host_held > options.host_blocks_per_worker) {
          r.removed_blocks +=
              index->Evict(node, Tier::kHost, host_held - options.host_blocks_per_worker).size();
        }
      } else {
        r.removed_blocks += index->Evict(node, Tier::kGpu, needed - capacity).size();
      }
    }
    if (!onboard.empty()) {
      r.onboarded_blocks +=
          index->ChangeTier({node, Tier::kHost, 0}, {node, Tier::kGpu, 0}, onboard);
    }
    if (fresh > 0) {
      std::optional<BlockKey> parent;
      if (prefix > 0) parent = keys[prefix - 1];
      const std::span<const BlockKey> new_keys(keys.begin() + prefix,
                                               keys.begin() + prefix + fresh);
      KVTIER_RETURN_IF_ERROR(index->Store({0, parent, new_keys, {node, Tier::kGpu, 0}, {}}));
      r.stored_blocks += fresh;
    }
    const auto done = Clock::now();
    active.Start(node,
                 static_cast<double>(trace[i].timestamp_ms) +
                     options.decode_ms_per_token * trace[i].output_length,
                 keys.size());
    index_seconds += std::chrono::duration<double>(done - start).count();
    pass.lookup_us.push_back(std::chrono::duration<double, std::micro>(looked_up - start).count());
    ++r.lookups;
    r.blocks_looked_up += keys.size();
    hit_blocks += prefix;
  }
  const coordinator::BlockIndexStats stats = index->Stats();
  r.requests = prompts.size();
  r.seconds = index_seconds;
  r.indexed_blocks = stats.blocks;
  r.bytes_per_block =
      stats.blocks == 0 ? 0.0 : static_cast<double>(stats.memory_bytes) / stats.blocks;
  r.hit_rate = r.blocks_looked_up == 0 ? 0.0 : static_cast<double>(hit_blocks) / r.blocks_looked_up;
  return pass;
}

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  const size_t k =
      std::min(values.size() - 1, static_cast<size_t>(q * static_cast<double>(values.size())));
  std::nth_element(values.begin(), values.begin() + static_cast<long>(k), values.end());
  return values[k];
}

}  // namespace

Result<IndexBenchResult> RunIndexBench(const std::vector<TraceRequest>& trace,
                                       const IndexBenchOptions& options) {
  if (options.workers == 0 || options.workers > coordinator::kMaxNodes) {
    return InvalidArgumentError("--workers must be in [1, " +
                                std::to_string(coordinator::kMaxNodes) + "]");
  }
  if (options.gpu_blocks_per_worker == 0)
    return InvalidArgumentError("--gpu-blocks must be positive");
  if (options.passes == 0) return InvalidArgumentError("--passes must be positive");
  if (options.sink_blocks > options.window_blocks) {
    return InvalidArgumentError("--sink-blocks " + std::to_string(options.sink_blocks) +
                                " exceeds --window-blocks " +
                                std::to_string(options.window_blocks));
  }
  // Keys are computed before timing: engines hash blocks, the index only stores them.
  const OpaqueKeyNamespace ns("mooncake", "");
  std::vector<std::vector<BlockKey>> prompts;
  prompts.reserve(trace.size());
  for (const TraceRequest& request : trace) {
    std::vector<BlockKey>& keys = prompts.emplace_back();
    for (uint64_t id : request.hash_ids) keys.push_back(ns.Key(id));
  }
  std::vector<PassResult> passes;
  for (uint32_t p = 0; p < options.passes; ++p) {
    KVTIER_ASSIGN_OR_RETURN(PassResult pass, RunPass(trace, prompts, options));
    passes.push_back(std::move(pass));
  }
  std::vector<size_t> order(passes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return passes[a].totals.seconds < passes[b].totals.seconds;
  });
  PassResult& median = passes[order[order.size() / 2]];
  IndexBenchResult result = median.totals;
  for (const PassResult& pass : passes) result.pass_seconds.push_back(pass.totals.seconds);
  const double ops =
      static_cast<double>(result.lookups + result.stored_blocks + result.removed_blocks +
                          result.offloaded_blocks + result.onboarded_blocks);
  result.ops_per_sec = ops / result.seconds;
  result.requests_per_sec = static_cast<double>(result.requests) / result.seconds;
  result.lookup_p50_us = Percentile(median.lookup_us, 0.50);
  result.lookup_p99_us = Percentile(median.lookup_us, 0.99);
  return result;
}

}  // namespace kvtier::bench
