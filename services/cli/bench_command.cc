#include "services/cli/bench_command.h"

#include <cstdio>

#include "services/bench/index_bench.h"
#include "services/bench/trace.h"

namespace kvtier::cli {

BenchCommand::BenchCommand(CLI::App& app) {
  bench_ = app.add_subcommand("bench", "Benchmarks: index (today); pool, transfer and disk arrive with their parts.");
  bench_->require_subcommand(1);
  index_ = bench_->add_subcommand(
      "index", "Replay a Mooncake trace through the coordinator's prefix index on one core: lookups, routing, "
               "stored and evicted blocks. Prints ops/s, lookup latency, memory per block, hit rate.");
  index_->add_option("--trace", trace_, "Mooncake-format trace (JSON lines with hash_ids of 512-token blocks)")
      ->required()
      ->check(CLI::ExistingFile)
      ->type_name("FILE");
  index_->add_option("--workers", workers_, "Simulated GPU workers")->check(CLI::Range(1, 4096))->capture_default_str();
  index_->add_option("--gpu-blocks", gpu_blocks_, "GPU blocks per worker")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32))
      ->capture_default_str();
  index_->add_option("--passes", passes_, "Passes over the trace, each on a fresh index; the median is reported")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  index_->add_flag("--json", json_, "Print one JSON object");
  for (const char* name : {"pool", "transfer", "disk"}) {
    later_.push_back(bench_->add_subcommand(name, std::string("Benchmark of the ") + name +
                                                      " path (arrives with that component)"));
    later_.back()->allow_extras();
  }
  bench_->footer("Example:\n  kvtier bench index --trace ../shared/traces/conversation_trace.jsonl --json");
}

int BenchCommand::Run() const {
  for (const CLI::App* later : later_) {
    if (later->parsed()) {
      std::fprintf(stderr, "kvtier bench %s: not built yet; it arrives with the component it measures.\n",
                   later->get_name().c_str());
      return 1;
    }
  }
  Result<std::vector<bench::TraceRequest>> trace = bench::ReadMooncakeTrace(trace_);
  if (!trace.ok()) {
    std::fprintf(stderr, "kvtier bench index: %s\n", trace.status().message().c_str());
    return trace.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  bench::IndexBenchOptions options;
  options.workers = workers_;
  options.gpu_blocks_per_worker = gpu_blocks_;
  options.passes = passes_;
  Result<bench::IndexBenchResult> r = bench::RunIndexBench(*trace, options);
  if (!r.ok()) {
    std::fprintf(stderr, "kvtier bench index: %s\n", r.status().ToString().c_str());
    return 1;
  }
  if (json_) {
    std::printf(
        "{\"bench\":\"index\",\"requests\":%llu,\"workers\":%u,\"gpu_blocks_per_worker\":%llu,\"passes\":%u,"
        "\"ops_per_sec\":%.0f,\"requests_per_sec\":%.0f,\"lookups\":%llu,\"stored_blocks\":%llu,"
        "\"removed_blocks\":%llu,\"blocks_looked_up\":%llu,\"lookup_p50_us\":%.3f,\"lookup_p99_us\":%.3f,"
        "\"bytes_per_block\":%.1f,\"indexed_blocks\":%llu,\"hit_rate\":%.4f,\"seconds\":%.4f}\n",
        static_cast<unsigned long long>(r->requests), workers_, static_cast<unsigned long long>(gpu_blocks_), passes_,
        r->ops_per_sec, r->requests_per_sec, static_cast<unsigned long long>(r->lookups),
        static_cast<unsigned long long>(r->stored_blocks), static_cast<unsigned long long>(r->removed_blocks),
        static_cast<unsigned long long>(r->blocks_looked_up), r->lookup_p50_us, r->lookup_p99_us, r->bytes_per_block,
        static_cast<unsigned long long>(r->indexed_blocks), r->hit_rate, r->seconds);
    return 0;
  }
  std::printf("kvtier bench index: %llu requests, %u workers x %llu GPU blocks, median of %u passes\n",
              static_cast<unsigned long long>(r->requests), workers_, static_cast<unsigned long long>(gpu_blocks_),
              passes_);
  std::printf("  ops/s            %.2f M  (lookups + stored + removed blocks, one core)\n", r->ops_per_sec / 1e6);
  std::printf("  requests/s       %.0f\n", r->requests_per_sec);
  std::printf("  lookup p50/p99   %.2f / %.2f us\n", r->lookup_p50_us, r->lookup_p99_us);
  std::printf("  memory/block     %.1f bytes (%llu blocks indexed)\n", r->bytes_per_block,
              static_cast<unsigned long long>(r->indexed_blocks));
  std::printf("  hit rate         %.2f%% of prompt blocks\n", 100.0 * r->hit_rate);
  return 0;
}

}  // namespace kvtier::cli
