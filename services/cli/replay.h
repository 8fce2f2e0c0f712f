// Replay: a request trace played through a kvtier cluster by inference clients, the way
// an engine would use the cache, with the hit rates and costs it saw.
//
// For each request, in trace order: Lookup the prompt's blocks at the coordinator (timed),
// Allocate the sequence at the worker (the pool's cached prefix is reused in place),
// Onboard what the node's host and disk tiers hold after it, and then what the other
// nodes the lookup named hold (cross-node reuse, as an engine does), Commit every block of the
// prompt (the ones the engine computed become cached), Free the sequence. Capacity
// pressure does the rest: the pool evicts to the host tier, the host tier demotes to
// disk, as each is configured.
//
// Blocks are the trace's: each hash id is one block of `tokens_per_block` tokens (the
// last one of a prompt may be partial; it counts as a block and, for the token-weighted
// rates, with its real length). The cluster's blocks may be smaller (its worker pool's
// layout, asked before the replay starts): a trace block is then that many consecutive
// cluster blocks, each under its own opaque key (common/block_key.h). A trace block is a
// hit when the sequence starts with all of it cached: reused in the pool (gpu), or
// onboarded from the host or disk tier or another node (by where its last part came from). The
// unbounded bound is the longest-prefix hit rate of a cache that never forgets, computed from the
// trace alone.
//
// `clients` inference clients (one connection each) take requests in trace order.
//
// Thread safety: Run blocks its caller; the progress callback is called from client
// threads, one call at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/bench/trace.h"
#include "services/client/client.h"

namespace kvtier::cli {

struct ReplayOptions {
  // Opens one client connection (called once per client, before any request is sent).
  std::function<Result<std::unique_ptr<client::Client>>()> connect;
  uint32_t clients = 1;
  uint32_t tokens_per_block = bench::kMooncakeTokensPerBlock;  // the trace's
  std::function<void(size_t done, size_t total)> progress;     // optional
  // 0: each prompt in one Allocate (an engine that prefills at once). Otherwise chunked
  // prefill, as an engine over windowed pools runs it: Allocate the cached prefix and one
  // chunk of this many cluster blocks, then Extend chunk by chunk, each committed as it
  // is computed, so that a windowed pool lets go of what left its window as it goes.
  uint32_t prefill_chunk_blocks = 0;
};

// `kvtier replay --layout`: the same replay with every layer at full attention in the same
// memory, and what the layout saves of the KV its sequences hold.
struct LayoutComparison {
  double full_block_hit_rate = 0;
  double full_token_hit_rate = 0;
  double sequence_kv_saved = 0;  // SequenceKvSaved of the trace
};

struct ReplayReport {
  uint64_t requests = 0;
  uint64_t blocks = 0;             // block references in the prompts
  uint64_t tokens = 0;             // prompt tokens
  uint64_t hit_blocks_gpu = 0;     // reused in the worker's pool
  uint64_t hit_blocks_host = 0;    // onboarded from the host tier
  uint64_t hit_blocks_disk = 0;    // onboarded from the disk tier
  uint64_t hit_blocks_remote = 0;  // onboarded from other nodes (the sources the lookup named)
  uint64_t hit_tokens = 0;         // prompt tokens whose KV was cached: tokens saved
  uint64_t bound_hit_blocks = 0;   // the unbounded cache's hits
  uint64_t bound_hit_tokens = 0;
  uint64_t refused_requests = 0;  // the pool had no room even after eviction (kResourceExhausted)
  uint64_t offloaded_blocks = 0;  // pool -> host tier
  uint64_t block_bytes = 0;       // of one trace block in the cluster's layout (every pool)
  std::vector<std::string>
      pools;  // the worker's pools' layouts (fingerprints); a sequence spans all
  std::optional<LayoutComparison> layout;
  // The node's own tiers, where the replay can read them (embedded): payload bytes the
  // disk tier wrote, and blocks its admission kept out of it.
  std::optional<uint64_t> disk_written_bytes;
  uint64_t dropped_by_admission = 0;
  double seconds = 0;
  double lookup_p50_us = 0;
  double lookup_p99_us = 0;
  uint32_t clients = 0;

  uint64_t hit_blocks() const {
    return hit_blocks_gpu + hit_blocks_host + hit_blocks_disk + hit_blocks_remote;
  }
  double block_hit_rate() const { return blocks == 0 ? 0 : double(hit_blocks()) / double(blocks); }
  double token_hit_rate() const { return tokens == 0 ? 0 : double(hit_tokens) / double(tokens); }
  double bound_block_hit_rate() const {
    return blocks == 0 ? 0 : double(bound_hit_blocks) / double(blocks);
  }
  double bound_token_hit_rate() const {
    return tokens == 0 ? 0 : double(bound_hit_tokens) / double(tokens);
  }
  double requests_per_second() const { return seconds <= 0 ? 0 : double(requests) / seconds; }
};

// The share of KV blocks a layout saves its sequences against every layer at full
// attention: each request's prompt (in blocks of `tokens_per_block`) holds, per layer,
// every block under full attention (window 0) and at most its sink blocks plus its window
// in a windowed layer (what a windowed pool keeps of a running sequence).
// `windows`: one per layer. 0 when there are no requests.
double SequenceKvSaved(std::span<const bench::TraceRequest> requests, uint32_t tokens_per_block,
                       std::span<const uint32_t> windows, uint32_t sink_tokens);

// Each request's sequence spans every pool of the worker (Allocate's pool_ids). Any error
// other than a refused allocation stops the replay and is returned, naming the request.
// kInvalidArgument when the cluster's blocks do not divide the trace's.
[[nodiscard]] Result<ReplayReport> RunReplay(std::span<const bench::TraceRequest> requests,
                                             const ReplayOptions& options);

// One JSON object: block_hit_rate, token_hit_rate, hits_by_tier {gpu, host, disk, remote},
// requests, lookup_p50_us, lookup_p99_us, and the rest of the report.
std::string ReplayReportJson(const ReplayReport& report);
// For people: a few aligned lines. `source` names the workload; `cluster` describes it.
std::string ReplayReportText(const ReplayReport& report, const std::string& source,
                             const std::string& cluster);

}  // namespace kvtier::cli
