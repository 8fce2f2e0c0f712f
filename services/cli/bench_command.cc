#include "services/cli/bench_command.h"

#include <cstdio>
#include <optional>

#include "services/bench/index_driver.h"
#include "services/bench/pool_driver.h"
#include "services/bench/trace.h"
#include "services/bench/rpc/lookup_rpc_driver.h"

namespace kvtier::cli {

BenchCommand::BenchCommand(CLI::App& app) {
  bench_ = app.add_subcommand("bench",
                              "Benchmarks: index, lookup-rpc, lookup-http, pool, disk, transfer.");
  bench_->require_subcommand(1);
  AddIndex();
  AddLookupRpc();
  AddLookupHttp();
  AddPool();
  AddDisk();
  AddTransfer();
  bench_->footer(
      "Example:\n  kvtier bench index --trace ../shared/traces/conversation_trace.jsonl --json");
}

void BenchCommand::AddIndex() {
  index_ = bench_->add_subcommand(
      "index",
      "Replay a Mooncake trace through the coordinator's prefix index on one core: lookups, "
      "routing, "
      "stored and evicted blocks. Prints ops/s, lookup latency, memory per block, hit rate.");
  index_
      ->add_option("--trace", trace_,
                   "Mooncake-format trace (JSON lines with hash_ids of 512-token blocks)")
      ->required()
      ->check(CLI::ExistingFile)
      ->type_name("FILE");
  index_->add_option("--workers", workers_, "Simulated GPU workers")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  index_->add_option("--gpu-blocks", gpu_blocks_, "GPU blocks per worker")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32))
      ->capture_default_str();
  index_
      ->add_option("--passes", passes_,
                   "Passes over the trace, each on a fresh index; the median is reported")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  index_
      ->add_option("--host-blocks", host_blocks_, "Host-memory blocks per worker (0: no host tier)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 32))
      ->capture_default_str();
  index_
      ->add_option("--admission", admission_,
                   "Who may enter the host tier: none (every evicted block) or "
                   "frequency (requested at least twice, TinyLFU sketch)")
      ->check(CLI::IsMember({"none", "frequency"}))
      ->capture_default_str();
  index_
      ->add_option(
          "--window-blocks", window_blocks_,
          "Attention window of the GPU pools in blocks (0: full attention); windowed pools evict "
          "interior blocks past every window")
      ->check(CLI::Range(0u, 1u << 20))
      ->capture_default_str();
  index_
      ->add_option("--sink-blocks", sink_blocks_,
                   "Sink blocks of a windowed pool (at most --window-blocks)")
      ->check(CLI::Range(0u, 1u << 20))
      ->capture_default_str();
  index_
      ->add_option("--overlap-weight", overlap_weight_,
                   "Routing cost = weight x blocks to prefill + active blocks of the worker")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  index_->add_flag("--json", json_, "Print one JSON object");
}

void BenchCommand::AddLookupRpc() {
  lookup_rpc_ = bench_->add_subcommand("lookup-rpc",
                                       "Lookup latency over the RPC on loopback at a fixed rate "
                                       "(open loop): an embedded coordinator "
                                       "loaded with a trace's blocks, one tenant connection.");
  lookup_rpc_->add_option("--trace", trace_, "Mooncake-format trace whose prompts are looked up")
      ->required()
      ->check(CLI::ExistingFile)
      ->type_name("FILE");
  lookup_rpc_->add_option("--rate", rate_, "Lookups per second")
      ->check(CLI::Range(1.0, 1e7))
      ->capture_default_str();
  lookup_rpc_->add_option("--seconds", seconds_, "Duration of the load")
      ->check(CLI::Range(0.1, 50.0))
      ->capture_default_str();
  lookup_rpc_
      ->add_option(
          "--busy-poll-us", busy_poll_us_,
          "The coordinator's coordinator.busy_poll_us: after each call its RPC thread polls "
          "without sleeping this long (0: off)")
      ->check(CLI::Range(0, 10000))
      ->capture_default_str();
  lookup_rpc_->add_flag(
      "--full-answers", full_answers_,
      "Ask for the full answer form (a node name per location, each block's key), as clients "
      "before compact answers did; default: the compact form the SDK asks for");
  lookup_rpc_->add_flag("--json", json_, "Print one JSON object");
}

void BenchCommand::AddLookupHttp() {
  lookup_http_ = bench_->add_subcommand(
      "lookup-http",
      "The routing API's POST /v1/lookup latency at a fixed rate (open loop) on keep-alive "
      "connections: an embedded coordinator following one engine that stores the prompts.");
  LookupHttpBenchOptions& o = lookup_http_options_;
  lookup_http_->add_option("--tokens", o.tokens, "Tokens per prompt")
      ->check(CLI::Range(16u, 1u << 20))
      ->capture_default_str();
  lookup_http_->add_option("--prompts", o.prompts, "Distinct prompts, posted round robin")
      ->check(CLI::Range(1u, 1u << 16))
      ->capture_default_str();
  lookup_http_->add_option("--rate", o.rate_per_sec, "Calls per second")
      ->check(CLI::Range(1.0, 1e6))
      ->capture_default_str();
  lookup_http_->add_option("--seconds", o.seconds, "Duration of the load")
      ->check(CLI::Range(0.1, 60.0))
      ->capture_default_str();
  lookup_http_->add_option("--connections", o.connections, "Keep-alive connections")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  lookup_http_->add_flag("--route", o.route, "POST /v1/route instead of /v1/lookup");
  lookup_http_->add_flag("--json", json_, "Print one JSON object");
}

int BenchCommand::RunLookupHttp() const {
  const LookupHttpBenchOptions& o = lookup_http_options_;
  Result<LookupHttpBenchResult> r = RunLookupHttpBench(o);
  if (!r.ok()) {
    std::fprintf(stderr, "kvtier bench lookup-http: %s\n", r.status().ToString().c_str());
    return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (json_) {
    std::printf(
        "{\"bench\":\"lookup-http\",\"path\":\"%s\",\"tokens\":%u,\"rate\":%.0f,"
        "\"connections\":%u,\"achieved_rate\":%.0f,\"calls\":%llu,\"errors\":%llu,"
        "\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f,"
        "\"matched_tokens\":%u,\"server_cpu_us_per_call\":%.1f}\n",
        o.route ? "/v1/route" : "/v1/lookup", o.tokens, o.rate_per_sec, o.connections,
        r->achieved_rate, static_cast<unsigned long long>(r->calls),
        static_cast<unsigned long long>(r->errors), r->p50_us, r->p90_us, r->p99_us, r->p999_us,
        r->max_us, r->matched_tokens, r->server_cpu_us_per_call);
  } else {
    std::printf("kvtier bench lookup-http: %llu calls of %s at %.0f/s (asked %.0f/s), %llu errors\n",
                static_cast<unsigned long long>(r->calls), o.route ? "/v1/route" : "/v1/lookup",
                r->achieved_rate, o.rate_per_sec, static_cast<unsigned long long>(r->errors));
    std::printf("  latency p50 %.1f us, p90 %.1f us, p99 %.1f us, p99.9 %.1f us, max %.1f us\n",
                r->p50_us, r->p90_us, r->p99_us, r->p999_us, r->max_us);
    std::printf("  %u tokens a prompt, %u matched in the last answer; coordinator CPU %.1f us a call\n",
                o.tokens, r->matched_tokens, r->server_cpu_us_per_call);
  }
  return r->errors == 0 ? 0 : 1;
}

void BenchCommand::AddPool() {
  pool_ = bench_->add_subcommand(
      "pool",
      "Worker block pool: allocation plus free of blocks on one core (pool of 100,000 blocks, "
      "allocations "
      "of 10-1000), and gather/scatter of pool blocks against a plain copy of the same bytes.");
  pool_
      ->add_option("--block-bytes", pool_options_.block_bytes,
                   "Bytes per block for gather and scatter")
      ->check(CLI::Range(uint64_t{16}, uint64_t{1} << 30))
      ->capture_default_str();
  pool_->add_option("--batch-blocks", pool_options_.batch_blocks, "Blocks per gather/scatter batch")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  pool_
      ->add_option("--copy-pool-blocks", pool_options_.copy_pool_blocks,
                   "Blocks in the pool the batches come from")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  pool_
      ->add_option("--update-batch", pool_options_.update_batch,
                   "Sequences per KV update (8 bf16 heads of 128 each)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  pool_
      ->add_option("--update-tokens", pool_options_.update_tokens,
                   "Tokens each sequence appends per KV update")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  pool_
      ->add_option("--update-max-seq", pool_options_.update_max_seq,
                   "Tokens of the KV cache per sequence")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  pool_
      ->add_option("--alloc-seconds", pool_options_.alloc_seconds,
                   "Duration of the allocation loop")
      ->check(CLI::Range(0.05, 30.0))
      ->capture_default_str();
  pool_->add_flag("--cpu", force_cpu_, "Use the CPU kernels even when a GPU is present");
  pool_->add_flag("--json", json_, "Print one JSON object");
}

void BenchCommand::AddDisk() {
  disk_ = bench_->add_subcommand("disk",
                                 "Disk tier: sustained put and get of blocks (payload segments, "
                                 "headers in RocksDB) against a raw sequential "
                                 "write and read of the same bytes on the same file system, each "
                                 "write side as durable as --sync makes a "
                                 "put (fdatasync per batch under fsync, the page cache otherwise), "
                                 "reads from a cold page cache.");
  disk_
      ->add_option("--dir", disk_options_.dir,
                   "Directory on the disk to measure (a scratch subdirectory is made "
                   "and removed)")
      ->check(CLI::ExistingDirectory)
      ->capture_default_str();
  disk_
      ->add_option("--total-bytes", disk_options_.total_bytes,
                   "Bytes written and read by each side")
      ->check(CLI::Range(uint64_t{4096}, uint64_t{1} << 40))
      ->capture_default_str();
  disk_->add_option("--block-bytes", disk_options_.block_bytes, "Bytes per block")
      ->check(CLI::Range(uint64_t{4096}, uint64_t{256} << 20))
      ->capture_default_str();
  disk_->add_option("--batch-blocks", disk_options_.batch_blocks, "Blocks per put batch")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  disk_
      ->add_option("--sync", disk_options_.sync,
                   "Disk tier durability: none, wal or fsync (see storage/disk_tier.h)")
      ->check(CLI::IsMember({"none", "wal", "fsync"}))
      ->capture_default_str();
  disk_
      ->add_option("--threads", disk_options_.threads,
                   "Threads per side: each puts, gets, writes or reads its own share of the blocks")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  disk_->add_flag("--json", json_, "Print one JSON object");
}

int BenchCommand::Run() const {
  if (pool_->parsed()) return RunPool();
  if (transfer_->parsed()) return RunTransfer();
  if (disk_->parsed()) return RunDisk();
  if (lookup_http_->parsed()) return RunLookupHttp();
  return lookup_rpc_->parsed() ? RunLookupRpc() : RunIndex();
}

int BenchCommand::RunPool() const {
  bench::PoolBenchOptions options = pool_options_;
  options.allow_gpu = !force_cpu_;
  Result<bench::PoolBenchResult> r = bench::RunPoolBench(options);
  if (!r.ok()) {
    std::fprintf(stderr, "kvtier bench pool: %s\n", r.status().ToString().c_str());
    return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (json_) {
    std::printf(
        "{\"bench\":\"pool\",\"alloc_free_per_sec\":%.0f,\"alloc_free_blocks\":%llu,\"backend\":\"%"
        "s\","
        "\"block_bytes\":%llu,\"batch_blocks\":%u,\"update_batch\":%u,\"update_tokens\":%u,"
        "\"update_max_seq\":%u,\"gather_gbps\":%.2f,\"scatter_gbps\":%.2f,"
        "\"memcpy_gbps\":%.2f,\"offload_gbps\":%.2f,\"onboard_gbps\":%.2f,\"pinned_d2h_gbps\":%.2f,"
        "\"pinned_h2d_gbps\":%.2f,\"update_gbps\":%.2f,\"update_copy_gbps\":%.2f}\n",
        r->alloc_free_per_sec, static_cast<unsigned long long>(r->alloc_free_blocks),
        r->backend.c_str(), static_cast<unsigned long long>(options.block_bytes),
        options.batch_blocks, options.update_batch, options.update_tokens, options.update_max_seq,
        r->gather_gbps, r->scatter_gbps, r->memcpy_gbps, r->offload_gbps, r->onboard_gbps,
        r->pinned_d2h_gbps, r->pinned_h2d_gbps, r->update_gbps, r->update_copy_gbps);
    return 0;
  }
  std::printf("kvtier bench pool (%s kernels)\n", r->backend.c_str());
  std::printf("  alloc+free       %.2f M blocks/s (%llu blocks, pool of %u)\n",
              r->alloc_free_per_sec / 1e6, static_cast<unsigned long long>(r->alloc_free_blocks),
              options.pool_blocks);
  std::printf("  gather           %.2f GB/s (%u blocks of %llu bytes)\n", r->gather_gbps,
              options.batch_blocks, static_cast<unsigned long long>(options.block_bytes));
  std::printf("  scatter          %.2f GB/s\n", r->scatter_gbps);
  std::printf("  plain copy       %.2f GB/s (the same bytes, one contiguous run)\n",
              r->memcpy_gbps);
  std::printf(
      "  offload          %.2f GB/s (gather into pinned host memory; plain copy %.2f GB/s)\n",
      r->offload_gbps, r->pinned_d2h_gbps);
  std::printf(
      "  onboard          %.2f GB/s (scatter from pinned host memory; plain copy %.2f GB/s)\n",
      r->onboard_gbps, r->pinned_h2d_gbps);
  std::printf("  KV update        %.2f GB/s (plain copy of the same bytes %.2f GB/s)\n",
              r->update_gbps, r->update_copy_gbps);
  return 0;
}

// The raw write's durability, which is the tier's under --sync (disk_driver.h).
const char* BenchCommand::RawWriteSync() const {
  return disk_options_.sync == "fsync" ? "fdatasync per batch" : "page cache";
}

int BenchCommand::RunDisk() const {
  Result<bench::DiskBenchResult> r = bench::RunDiskBench(disk_options_);
  if (!r.ok()) {
    std::fprintf(stderr, "kvtier bench disk: %s\n", r.status().ToString().c_str());
    return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (json_) {
    std::printf(
        "{\"bench\":\"disk\",\"sync\":\"%s\",\"threads\":%u,\"block_bytes\":%llu,\"blocks\":%llu,"
        "\"put_gbps\":%.3f,\"get_gbps\":%.3f,\"raw_write_gbps\":%.3f,\"raw_read_gbps\":%.3f,"
        "\"raw_write_sync\":\"%s\",\"put_batches_per_group\":%.2f}\n",
        disk_options_.sync.c_str(), disk_options_.threads,
        static_cast<unsigned long long>(disk_options_.block_bytes),
        static_cast<unsigned long long>(r->blocks), r->put_gbps, r->get_gbps, r->raw_write_gbps,
        r->raw_read_gbps, RawWriteSync(), r->put_batches_per_group);
    return 0;
  }
  std::printf("kvtier bench disk (sync %s, %llu blocks of %llu bytes, %u threads)\n",
              disk_options_.sync.c_str(), static_cast<unsigned long long>(r->blocks),
              static_cast<unsigned long long>(disk_options_.block_bytes), disk_options_.threads);
  std::printf(
      "  put        %.3f GB/s   raw write %.3f GB/s (%s)   ratio %.2f   (%.2f batches a write)\n",
      r->put_gbps, r->raw_write_gbps, RawWriteSync(), r->put_gbps / r->raw_write_gbps,
      r->put_batches_per_group);
  std::printf("  get        %.3f GB/s   raw read  %.3f GB/s   ratio %.2f\n", r->get_gbps,
              r->raw_read_gbps, r->get_gbps / r->raw_read_gbps);
  return 0;
}

// Reads --trace; on failure prints why and sets `exit_code` (2 for a malformed file).
static std::optional<std::vector<bench::TraceRequest>> LoadTrace(const std::string& path,
                                                                 const char* command,
                                                                 int& exit_code) {
  Result<std::vector<bench::TraceRequest>> trace = bench::ReadMooncakeTrace(path);
  if (trace.ok()) return *std::move(trace);
  std::fprintf(stderr, "kvtier bench %s: %s\n", command, trace.status().message().c_str());
  exit_code = trace.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  return std::nullopt;
}

int BenchCommand::RunLookupRpc() const {
  int exit_code = 0;
  std::optional<std::vector<bench::TraceRequest>> trace =
      LoadTrace(trace_, "lookup-rpc", exit_code);
  if (!trace) return exit_code;
  bench::LookupRpcBenchOptions options;
  for (const bench::TraceRequest& r : *trace) options.prompts.push_back(r.hash_ids);
  options.rate_per_sec = rate_;
  options.seconds = seconds_;
  options.busy_poll_us = busy_poll_us_;
  options.compact_answers = !full_answers_;
  Result<bench::LookupRpcBenchResult> r = bench::RunLookupRpcBench(options);
  if (!r.ok()) {
    std::fprintf(stderr, "kvtier bench lookup-rpc: %s\n", r.status().ToString().c_str());
    return 1;
  }
  if (json_) {
    std::printf(
        "{\"bench\":\"lookup-rpc\",\"rate\":%.0f,\"busy_poll_us\":%llu,\"answers\":\"%s\","
        "\"achieved_rate\":%.0f,\"calls\":%llu,\"errors\":%llu,"
        "\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f,"
        "\"indexed_blocks\":%llu,\"mean_matched_blocks\":%.2f,\"mean_locations\":%.2f,"
        "\"mean_answer_bytes\":%.1f,\"server_switches_per_call\":%.2f,\"server_cpu_us_per_call\":%."
        "1f}\n",
        rate_, static_cast<unsigned long long>(busy_poll_us_), full_answers_ ? "full" : "compact",
        r->achieved_rate, static_cast<unsigned long long>(r->calls),
        static_cast<unsigned long long>(r->errors), r->p50_us, r->p90_us, r->p99_us, r->p999_us,
        r->max_us, static_cast<unsigned long long>(r->indexed_blocks), r->mean_matched_blocks,
        r->mean_locations, r->mean_answer_bytes, r->server_switches_per_call,
        r->server_cpu_us_per_call);
    return r->errors == 0 ? 0 : 1;
  }
  std::printf(
      "kvtier bench lookup-rpc: %llu lookups at %.0f/s (asked %.0f/s), %llu errors, %llu blocks "
      "indexed\n",
      static_cast<unsigned long long>(r->calls), r->achieved_rate, rate_,
      static_cast<unsigned long long>(r->errors),
      static_cast<unsigned long long>(r->indexed_blocks));
  std::printf("  latency p50 %.1f us, p90 %.1f us, p99 %.1f us, p99.9 %.1f us, max %.1f us\n",
              r->p50_us, r->p90_us, r->p99_us, r->p999_us, r->max_us);
  std::printf("  answers (%s form): %.1f blocks matched, %.1f locations, %.0f bytes on average\n",
              full_answers_ ? "full" : "compact", r->mean_matched_blocks, r->mean_locations,
              r->mean_answer_bytes);
  std::printf("  server thread: %.2f sleeps and %.1f us of CPU per call\n",
              r->server_switches_per_call, r->server_cpu_us_per_call);
  return r->errors == 0 ? 0 : 1;
}

int BenchCommand::RunIndex() const {
  int exit_code = 0;
  std::optional<std::vector<bench::TraceRequest>> trace = LoadTrace(trace_, "index", exit_code);
  if (!trace) return exit_code;
  bench::IndexBenchOptions options;
  options.workers = workers_;
  options.gpu_blocks_per_worker = gpu_blocks_;
  options.passes = passes_;
  options.host_blocks_per_worker = host_blocks_;
  options.frequency_admission = admission_ == "frequency";
  options.overlap_weight = overlap_weight_;
  options.window_blocks = window_blocks_;
  options.sink_blocks = sink_blocks_;
  Result<bench::IndexBenchResult> r = bench::RunIndexBench(*trace, options);
  if (!r.ok()) {
    std::fprintf(stderr, "kvtier bench index: %s\n", r.status().ToString().c_str());
    return 1;
  }
  if (json_) {
    std::printf(
        "{\"bench\":\"index\",\"requests\":%llu,\"workers\":%u,\"gpu_blocks_per_worker\":%llu,"
        "\"passes\":%u,"
        "\"ops_per_sec\":%.0f,\"requests_per_sec\":%.0f,\"lookups\":%llu,\"stored_blocks\":%llu,"
        "\"removed_blocks\":%llu,\"blocks_looked_up\":%llu,\"lookup_p50_us\":%.3f,\"lookup_p99_"
        "us\":%.3f,"
        "\"bytes_per_block\":%.1f,\"indexed_blocks\":%llu,\"hit_rate\":%.4f,\"hits_by_tier\":{"
        "\"gpu\":%llu,\"host\":%llu},"
        "\"host_blocks_per_worker\":%llu,\"admission\":\"%s\",\"overlap_weight\":%g,\"offloaded_"
        "blocks\":%llu,\"onboarded_blocks\":%llu,"
        "\"window_blocks\":%u,\"sink_blocks\":%u,\"seconds\":%.4f}\n",
        static_cast<unsigned long long>(r->requests), workers_,
        static_cast<unsigned long long>(gpu_blocks_), passes_, r->ops_per_sec, r->requests_per_sec,
        static_cast<unsigned long long>(r->lookups),
        static_cast<unsigned long long>(r->stored_blocks),
        static_cast<unsigned long long>(r->removed_blocks),
        static_cast<unsigned long long>(r->blocks_looked_up), r->lookup_p50_us, r->lookup_p99_us,
        r->bytes_per_block, static_cast<unsigned long long>(r->indexed_blocks), r->hit_rate,
        static_cast<unsigned long long>(r->gpu_hit_blocks),
        static_cast<unsigned long long>(r->host_hit_blocks),
        static_cast<unsigned long long>(host_blocks_), admission_.c_str(), overlap_weight_,
        static_cast<unsigned long long>(r->offloaded_blocks),
        static_cast<unsigned long long>(r->onboarded_blocks), window_blocks_, sink_blocks_,
        r->seconds);
    return 0;
  }
  std::printf(
      "kvtier bench index: %llu requests, %u workers x %llu GPU blocks, median of %u passes\n",
      static_cast<unsigned long long>(r->requests), workers_,
      static_cast<unsigned long long>(gpu_blocks_), passes_);
  std::printf("  ops/s            %.2f M  (lookups + stored + removed blocks, one core)\n",
              r->ops_per_sec / 1e6);
  std::printf("  requests/s       %.0f\n", r->requests_per_sec);
  std::printf("  lookup p50/p99   %.2f / %.2f us\n", r->lookup_p50_us, r->lookup_p99_us);
  std::printf("  memory/block     %.1f bytes (%llu blocks indexed)\n", r->bytes_per_block,
              static_cast<unsigned long long>(r->indexed_blocks));
  std::printf("  hit rate         %.2f%% of prompt blocks (gpu %llu, host %llu blocks)\n",
              100.0 * r->hit_rate, static_cast<unsigned long long>(r->gpu_hit_blocks),
              static_cast<unsigned long long>(r->host_hit_blocks));
  return 0;
}

}  // namespace kvtier::cli
