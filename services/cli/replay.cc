#include "services/cli/replay.h"
#include "common/mutex.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>
#include <unordered_set>

namespace kvtier::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Tokens of block `index` of a prompt of `input_length` tokens (the last may be partial).
uint64_t BlockTokens(const bench::TraceRequest& request, size_t index, uint32_t tokens_per_block) {
  const uint64_t start = uint64_t{index} * tokens_per_block;
  if (start >= request.input_length) return 0;
  return std::min<uint64_t>(tokens_per_block, request.input_length - start);
}

// The unbounded cache: a request hits the longest prefix of its ids seen before (ids are
// prefix-chained, so a seen id means its whole prefix was seen).
void CountUnboundedBound(std::span<const bench::TraceRequest> requests, uint32_t tokens_per_block,
                         ReplayReport& report) {
  std::unordered_set<uint64_t> seen;
  for (const bench::TraceRequest& r : requests) {
    size_t hits = 0;
    while (hits < r.hash_ids.size() && seen.count(r.hash_ids[hits])) ++hits;
    report.bound_hit_blocks += hits;
    for (size_t i = 0; i < hits; ++i)
      report.bound_hit_tokens += BlockTokens(r, i, tokens_per_block);
    seen.insert(r.hash_ids.begin(), r.hash_ids.end());
  }
}

// What one client saw.
struct ClientTally {
  uint64_t gpu = 0, host = 0, disk = 0, remote = 0, hit_tokens = 0, refused = 0;
  std::vector<double> lookup_us;
};

class Replayer {
 public:
  // `parts`: cluster blocks per trace block.
  Replayer(std::span<const bench::TraceRequest> requests, const ReplayOptions& options,
           uint32_t parts, uint32_t pools)
      : requests_(requests), options_(options), parts_(parts), keys_("mooncake", "") {
    for (uint32_t p = 0; p < pools; ++p) pools_.push_back(p);
  }

  // Takes requests in order until none are left or one fails.
  Status RunClient(client::Client& client, ClientTally& tally) {
    for (size_t i = next_.fetch_add(1); i < requests_.size() && !failed_; i = next_.fetch_add(1)) {
      if (Status s = One(client, i, tally); !s.ok()) {
        failed_ = true;
        return s.WithContext("request " + std::to_string(i + 1));
      }
      const size_t done = done_.fetch_add(1) + 1;
      if (options_.progress) {
        MutexLock lock(progress_mu_);
        options_.progress(done, requests_.size());
      }
    }
    return Status::Ok();
  }

 private:
  Status One(client::Client& client, size_t index, ClientTally& tally) {
    const bench::TraceRequest& request = requests_[index];
    std::vector<BlockKey> keys;
    keys.reserve(request.hash_ids.size() * parts_);
    for (uint64_t id : request.hash_ids) {
      for (uint32_t part = 0; part < parts_; ++part) keys.push_back(keys_.Key(id * parts_ + part));
    }
    const uint64_t sequence = index + 1;

    const auto lookup_start = Clock::now();
    KVTIER_ASSIGN_OR_RETURN(const client::LookupResult lookup, client.Lookup(keys));
    tally.lookup_us.push_back(
        std::chrono::duration<double, std::micro>(Clock::now() - lookup_start).count());

    const auto total = static_cast<uint32_t>(keys.size());
    const uint32_t block_tokens = options_.tokens_per_block / parts_;  // the cluster's
    uint32_t in_table = total;
    if (options_.prefill_chunk_blocks > 0) {
      KVTIER_ASSIGN_OR_RETURN(const uint32_t local, client.LookupLocal(pools_, keys));
      in_table = std::min(total, local + options_.prefill_chunk_blocks);
    }
    const std::span<const BlockKey> all(keys);
    Result<client::Allocation> allocation =
        client.Allocate({.sequence = sequence,
                         .pool_ids = pools_,
                         .keys = {all.begin(), all.begin() + in_table},
                         .num_tokens = in_table * block_tokens});
    if (allocation.status().code() == StatusCode::kResourceExhausted) {
      ++tally.refused;
      return Status::Ok();
    }
    KVTIER_RETURN_IF_ERROR(allocation.status());
    // In cluster blocks: reused in the pool, then onboarded from the node's host tier, its
    // disk tier, then from the other nodes the lookup named, as an engine would; onboarding
    // goes on chunk by chunk while every block before was cached.
    const uint32_t reused = allocation->reused_blocks;
    uint32_t from_host = 0, from_disk = 0, cached = reused;
    const std::vector<std::string> sources = client::Client::SourcesOf(lookup);
    for (bool open = true;;) {
      if (open && cached < in_table) {
        KVTIER_ASSIGN_OR_RETURN(client::OnboardResult onboarded,
                                client.Onboard(sequence, all.first(in_table), {}, sources));
        // Counted in every pool the sequence spans: per pool, on average.
        from_host += onboarded.from_host / static_cast<uint32_t>(pools_.size());
        from_disk += onboarded.from_disk / static_cast<uint32_t>(pools_.size());
        cached = std::max(cached, onboarded.cached_blocks);
        open = cached == in_table;
      }
      // The engine computed the rest of the table: its blocks are now cached.
      KVTIER_RETURN_IF_ERROR(client.Commit(sequence, all.first(in_table)).status());
      if (in_table == total) break;
      in_table = std::min(total, in_table + options_.prefill_chunk_blocks);
      Result<client::Allocation> grown = client.Extend(sequence, in_table * block_tokens);
      if (grown.status().code() == StatusCode::kResourceExhausted) {
        ++tally.refused;
        return client.Free(sequence);
      }
      KVTIER_RETURN_IF_ERROR(grown.status());
    }
    // In whole trace blocks (onboarding fills in that order).
    const uint32_t gpu = reused / parts_, up_to_host = (reused + from_host) / parts_,
                   up_to_disk = (reused + from_host + from_disk) / parts_,
                   all_cached = cached / parts_;
    tally.gpu += gpu;
    tally.host += up_to_host - gpu;
    tally.disk += up_to_disk - up_to_host;
    tally.remote += all_cached - up_to_disk;
    for (uint32_t b = 0; b < all_cached; ++b)
      tally.hit_tokens += BlockTokens(request, b, options_.tokens_per_block);
    return client.Free(sequence);
  }

  std::span<const bench::TraceRequest> requests_;
  const ReplayOptions& options_;
  const uint32_t parts_;
  std::vector<uint32_t> pools_;  // every pool of the worker: a sequence spans them all
  const OpaqueKeyNamespace keys_;
  std::atomic<size_t> next_{0};
  std::atomic<size_t> done_{0};
  std::atomic<bool> failed_{false};
  Mutex progress_mu_;
};

uint64_t BlocksFor(uint64_t tokens, uint32_t tokens_per_block) {
  return (tokens + tokens_per_block - 1) / tokens_per_block;
}

double Percentile(std::vector<double>& values, double q) {
  if (values.empty()) return 0;
  const size_t at = std::min(values.size() - 1, static_cast<size_t>(q * double(values.size())));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(at), values.end());
  return values[at];
}

}  // namespace

double SequenceKvSaved(std::span<const bench::TraceRequest> requests, uint32_t tokens_per_block,
                       std::span<const uint32_t> windows, uint32_t sink_tokens) {
  uint64_t full = 0, kept = 0;
  for (const bench::TraceRequest& r : requests) {
    const uint64_t blocks = BlocksFor(r.input_length, tokens_per_block);
    for (const uint32_t window : windows) {
      full += blocks;
      kept += window == 0 ? blocks
                          : std::min(blocks, BlocksFor(window, tokens_per_block) +
                                                 BlocksFor(sink_tokens, tokens_per_block));
    }
  }
  return full == 0 ? 0 : 1.0 - double(kept) / double(full);
}

Result<ReplayReport> RunReplay(std::span<const bench::TraceRequest> requests,
                               const ReplayOptions& options) {
  if (options.clients == 0) return InvalidArgumentError("clients (--workers) must be at least 1");
  if (options.tokens_per_block == 0)
    return InvalidArgumentError("ReplayOptions.tokens_per_block must be at least 1");
  if (!options.connect) return InvalidArgumentError("ReplayOptions.connect is required");
  std::vector<std::unique_ptr<client::Client>> clients;
  for (uint32_t c = 0; c < options.clients; ++c) {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> client, options.connect());
    clients.push_back(std::move(client));
  }
  // The cluster's block size, from its worker's first pool.
  KVTIER_ASSIGN_OR_RETURN(client::WorkerStats before, clients[0]->GetWorkerStats());
  if (before.pool_layouts.empty())
    return FailedPreconditionError("the cluster's worker has no pool");
  const uint32_t cluster_tokens = before.pool_layouts[0].tokens_per_block();
  if (cluster_tokens > options.tokens_per_block || options.tokens_per_block % cluster_tokens != 0) {
    return InvalidArgumentError("the cluster's blocks of " + std::to_string(cluster_tokens) +
                                " tokens do not divide the trace's blocks of " +
                                std::to_string(options.tokens_per_block));
  }
  const uint32_t parts = options.tokens_per_block / cluster_tokens;
  ReplayReport report;
  report.clients = options.clients;
  for (const KvLayout& layout : before.pool_layouts) {
    report.block_bytes += uint64_t{parts} * layout.bytes_per_block();
    report.pools.push_back(layout.Fingerprint());
  }
  report.requests = requests.size();
  for (const bench::TraceRequest& r : requests) {
    report.blocks += r.hash_ids.size();
    report.tokens += r.input_length;
  }
  CountUnboundedBound(requests, options.tokens_per_block, report);

  Replayer replayer(requests, options, parts, static_cast<uint32_t>(before.pool_layouts.size()));
  std::vector<ClientTally> tallies(options.clients);
  std::vector<Status> outcomes(options.clients);
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (uint32_t c = 0; c < options.clients; ++c) {
    threads.emplace_back([&, c] { outcomes[c] = replayer.RunClient(*clients[c], tallies[c]); });
  }
  for (std::thread& t : threads) t.join();
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (const Status& s : outcomes) KVTIER_RETURN_IF_ERROR(s);

  std::vector<double> lookups;
  for (ClientTally& t : tallies) {
    report.hit_blocks_gpu += t.gpu;
    report.hit_blocks_host += t.host;
    report.hit_blocks_disk += t.disk;
    report.hit_blocks_remote += t.remote;
    report.hit_tokens += t.hit_tokens;
    report.refused_requests += t.refused;
    lookups.insert(lookups.end(), t.lookup_us.begin(), t.lookup_us.end());
  }
  report.lookup_p50_us = Percentile(lookups, 0.50);
  report.lookup_p99_us = Percentile(lookups, 0.99);
  KVTIER_ASSIGN_OR_RETURN(client::WorkerStats worker, clients[0]->GetWorkerStats());
  report.offloaded_blocks =  // counted in every pool: per pool, on average
      (worker.offloaded_blocks - before.offloaded_blocks) / parts / before.pool_layouts.size();
  return report;
}

namespace {

// The pools, and with --layout the comparison against all-full pools, as JSON members.
std::string LayoutJson(const ReplayReport& r) {
  std::string json = "\"pools\": [";
  for (size_t i = 0; i < r.pools.size(); ++i) json += (i ? ", \"" : "\"") + r.pools[i] + "\"";
  json += "], ";
  if (r.layout) {
    char comparison[256];
    std::snprintf(comparison, sizeof(comparison),
                  "\"all_full\": {\"block_hit_rate\": %.6f, \"token_hit_rate\": %.6f}, "
                  "\"sequence_kv_saved\": %.6f, ",
                  r.layout->full_block_hit_rate, r.layout->full_token_hit_rate,
                  r.layout->sequence_kv_saved);
    json += comparison;
  }
  return json;
}

// For people: the pools, and with --layout the comparison.
std::string LayoutText(const ReplayReport& r) {
  std::string text;
  if (r.pools.size() > 1) {
    text = "  pools           ";
    for (size_t i = 0; i < r.pools.size(); ++i) text += (i ? ", " : "") + r.pools[i];
    text += " (a sequence spans all)\n";
  }
  if (r.layout) {
    char lines[320];
    std::snprintf(lines, sizeof(lines),
                  "  all full        block hit rate %.4f, token hit rate %.4f: every layer at full "
                  "attention in the same memory\n"
                  "  sequence KV     %.1f%% less than with every layer full (each windowed layer "
                  "holds its sinks and window)\n",
                  r.layout->full_block_hit_rate, r.layout->full_token_hit_rate,
                  100.0 * r.layout->sequence_kv_saved);
    text += lines;
  }
  return text;
}

}  // namespace

std::string ReplayReportJson(const ReplayReport& r) {
  char out[2048];
  std::snprintf(
      out, sizeof(out),
      "{\"requests\": %llu, \"clients\": %u, \"blocks\": %llu, \"tokens\": %llu, "
      "\"block_hit_rate\": %.6f, \"token_hit_rate\": %.6f, "
      "\"hits_by_tier\": {\"gpu\": %llu, \"host\": %llu, \"disk\": %llu, \"remote\": %llu}, "
      "\"unbounded_block_hit_rate\": %.6f, \"unbounded_token_hit_rate\": %.6f, "
      "\"tokens_saved\": %llu, \"refused_requests\": %llu, "
      "\"bytes_moved\": {\"gpu_to_host\": %llu, \"host_to_gpu\": %llu, \"disk_to_gpu\": %llu, "
      "\"remote_to_gpu\": %llu}, %s"
      "%s\"seconds\": %.3f, \"requests_per_second\": %.1f, \"lookup_p50_us\": %.1f, "
      "\"lookup_p99_us\": %.1f}",
      static_cast<unsigned long long>(r.requests), r.clients,
      static_cast<unsigned long long>(r.blocks), static_cast<unsigned long long>(r.tokens),
      r.block_hit_rate(), r.token_hit_rate(), static_cast<unsigned long long>(r.hit_blocks_gpu),
      static_cast<unsigned long long>(r.hit_blocks_host),
      static_cast<unsigned long long>(r.hit_blocks_disk),
      static_cast<unsigned long long>(r.hit_blocks_remote), r.bound_block_hit_rate(),
      r.bound_token_hit_rate(), static_cast<unsigned long long>(r.hit_tokens),
      static_cast<unsigned long long>(r.refused_requests),
      static_cast<unsigned long long>(r.offloaded_blocks) * r.block_bytes,
      static_cast<unsigned long long>(r.hit_blocks_host) * r.block_bytes,
      static_cast<unsigned long long>(r.hit_blocks_disk) * r.block_bytes,
      static_cast<unsigned long long>(r.hit_blocks_remote) * r.block_bytes,
      !r.disk_written_bytes
          ? ""
          : ("\"disk_written_bytes\": " + std::to_string(*r.disk_written_bytes) +
             ", \"dropped_by_admission\": " + std::to_string(r.dropped_by_admission) + ", ")
                .c_str(),
      LayoutJson(r).c_str(), r.seconds, r.requests_per_second(), r.lookup_p50_us, r.lookup_p99_us);
  return out;
}

namespace {
std::string DiskWritesLine(const ReplayReport& r) {
  if (!r.disk_written_bytes) return "";
  char line[160];
  std::snprintf(line, sizeof(line),
                "  disk writes     %.1f MiB, %llu blocks kept out by admission\n",
                double(*r.disk_written_bytes) / (1 << 20),
                static_cast<unsigned long long>(r.dropped_by_admission));
  return line;
}
}  // namespace

std::string ReplayReportText(const ReplayReport& r, const std::string& source,
                             const std::string& cluster) {
  auto mib = [&](uint64_t blocks) { return double(blocks * r.block_bytes) / (1 << 20); };
  auto share = [](double rate, double bound) { return bound <= 0 ? 0.0 : 100.0 * rate / bound; };
  char out[2048];
  std::snprintf(out, sizeof(out),
                "kvtier replay: %llu requests of %s in %.1f s (%.0f requests/s, %u client%s)\n"
                "  cluster         %s\n"
                "  block hit rate  %.4f   (unbounded prefix bound %.4f: %.1f%% of it)\n"
                "  token hit rate  %.4f   (bound %.4f: %.1f%%)\n"
                "  hits by tier    gpu %llu, host %llu, disk %llu, other nodes %llu blocks\n"
                "  tokens saved    %llu of %llu prompt tokens\n"
                "  bytes moved     gpu->host %.1f MiB, host->gpu %.1f MiB, disk->gpu %.1f MiB, "
                "other nodes->gpu %.1f MiB\n"
                "%s"
                "  lookups         p50 %.0f us, p99 %.0f us\n"
                "%s%s",
                static_cast<unsigned long long>(r.requests), source.c_str(), r.seconds,
                r.requests_per_second(), r.clients, r.clients == 1 ? "" : "s", cluster.c_str(),
                r.block_hit_rate(), r.bound_block_hit_rate(),
                share(r.block_hit_rate(), r.bound_block_hit_rate()), r.token_hit_rate(),
                r.bound_token_hit_rate(), share(r.token_hit_rate(), r.bound_token_hit_rate()),
                static_cast<unsigned long long>(r.hit_blocks_gpu),
                static_cast<unsigned long long>(r.hit_blocks_host),
                static_cast<unsigned long long>(r.hit_blocks_disk),
                static_cast<unsigned long long>(r.hit_blocks_remote),
                static_cast<unsigned long long>(r.hit_tokens),
                static_cast<unsigned long long>(r.tokens), mib(r.offloaded_blocks),
                mib(r.hit_blocks_host), mib(r.hit_blocks_disk), mib(r.hit_blocks_remote),
                DiskWritesLine(r).c_str(), r.lookup_p50_us, r.lookup_p99_us, LayoutText(r).c_str(),
                r.refused_requests == 0
                    ? ""
                    : ("  refused         " + std::to_string(r.refused_requests) +
                       " requests found the pool full of running sequences (kResourceExhausted)\n")
                          .c_str());
  return out;
}

}  // namespace kvtier::cli
