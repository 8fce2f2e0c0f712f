#include "services/cli/replay_command.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>

#include "common/scratch_dir.h"
#include "services/auth/token_store.h"
#include "services/bench/chat_workload.h"
#include "services/cli/embedded_cluster.h"
#include "services/cli/fleet_replay.h"
#include "services/cli/local_node.h"
#include "services/cli/replay.h"

namespace kvtier::cli {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// A progress bar on a terminal, redrawn at most every 1%.
void DrawProgress(size_t done, size_t total) {
  if (total == 0) return;  // nothing to replay, nothing to draw
  const size_t width = 40, filled = done * width / total;
  if (done != total && (done * 100 / total) == ((done - 1) * 100 / total)) return;
  std::fprintf(stderr, "\r[%s%s] %zu/%zu requests", std::string(filled, '=').c_str(),
               std::string(width - filled, ' ').c_str(), done, total);
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

// What the embedded cluster is made of (the replay's flags).
struct EmbeddedShape {
  uint64_t gpu_blocks = 0, host_blocks = 0, disk_blocks = 0, block_bytes = 0;
  std::string admission;
  uint32_t admission_min_count = 0;
  std::string data_dir;
  std::vector<uint32_t> windows;  // per layer (0: full attention); empty: one full layer
  uint32_t sink_tokens = 0;
};

// The embedded cluster's layout: 512-token blocks (the trace's) of one KV head in fp16
// over one layer per window (one layer without windows), whose head_dim makes a block of
// every layer `block_bytes` long.
Result<KvtierConfig> EmbeddedConfig(const EmbeddedShape& shape) {
  constexpr uint64_t kBytesPerHeadDim = 2ull * bench::kMooncakeTokensPerBlock * 2;  // K and V, fp16
  const uint64_t layers = std::max<size_t>(1, shape.windows.size());
  const uint64_t unit = kBytesPerHeadDim * layers;
  if (shape.block_bytes < unit || shape.block_bytes % unit != 0) {
    return InvalidArgumentError(
        "--block-bytes " + std::to_string(shape.block_bytes) + ": must be a positive multiple of " +
        std::to_string(unit) + " (K and V of 512 fp16 tokens per head dimension, times " +
        std::to_string(layers) + " layer" + (layers == 1 ? ")" : "s of --layout)"));
  }
  if (shape.gpu_blocks == 0) return InvalidArgumentError("--gpu-blocks: must be at least 1");
  KvtierConfig config;
  config.data_dir = shape.data_dir;
  config.coordinator.listen = {"127.0.0.1:0"};
  config.worker.num_layers = static_cast<uint32_t>(layers);
  config.worker.num_kv_heads = 1;
  config.worker.head_dim = static_cast<uint32_t>(shape.block_bytes / unit);
  config.worker.tokens_per_block = bench::kMooncakeTokensPerBlock;
  config.worker.dtype = "fp16";
  config.worker.max_attention_window = shape.windows;
  config.worker.sink_tokens = shape.sink_tokens;
  config.worker.pool_bytes = shape.gpu_blocks * shape.block_bytes;
  config.worker.free_memory_fraction = 1.0;
  const uint64_t page =
      (shape.block_bytes + 4095) / 4096 * 4096;  // the host tier's page (local_node.cc)
  config.store.host_cache_bytes = shape.host_blocks * page;
  config.store.disk_bytes = shape.disk_blocks * shape.block_bytes;
  config.store.disk_admission = shape.admission;
  config.store.disk_admission_min_count = shape.admission_min_count;
  if (Status s = ValidateConfig(config); !s.ok()) return s;
  if (Result<std::vector<WorkerPoolLayout>> pools = WorkerLayouts(config.worker); !pools.ok())
    return InvalidArgumentError("--layout: " + pools.status().message());
  return config;
}

}  // namespace

ReplayCommand::ReplayCommand(CLI::App& app) {
  replay_ =
      app.add_subcommand("replay",
                         "Replay a Mooncake-format request trace (or a built-in chat workload) "
                         "through a cluster and report hit rates.");
  replay_
      ->add_option("--trace", trace_,
                   "Mooncake-format trace (JSON lines); default: the built-in chat workload")
      ->type_name("FILE");
  replay_
      ->add_option("--connect", connect_,
                   "Replay against this running cluster (host:port or unix:/path); "
                   "default: an embedded one")
      ->type_name("ADDR");
  replay_
      ->add_option("--coordinator", coordinator_,
                   "With --connect to a `kvtier worker`: the coordinator's "
                   "address, for lookups")
      ->type_name("ADDR");
  replay_->add_option("--token", token_, "Tenant token for --connect")->envname("KVTIER_TOKEN");
  replay_->add_option("--token-file", token_file_, "File whose first line is the token")
      ->type_name("FILE");
  replay_->add_option("--tls-ca-file", tls_ca_file_, "Use TLS; trust this CA bundle")
      ->type_name("FILE");
  replay_->add_option("--workers", workers_, "Concurrent inference clients (one connection each)")
      ->check(CLI::Range(1u, 256u))
      ->capture_default_str();
  replay_->add_option("--gpu-blocks", gpu_blocks_, "Embedded: blocks in the worker's pool")
      ->capture_default_str();
  replay_->add_option("--host-blocks", host_blocks_, "Embedded: blocks in the host tier (0: none)")
      ->capture_default_str();
  replay_->add_option("--disk-blocks", disk_blocks_, "Embedded: blocks in the disk tier (0: none)")
      ->capture_default_str();
  replay_
      ->add_option("--block-bytes", block_bytes_,
                   "Embedded: bytes per 512-token block (a multiple of 2048)")
      ->capture_default_str();
  replay_
      ->add_option("--layout", layout_,
                   "Embedded: per-layer attention windows in tokens (TensorRT-LLM's "
                   "max_attention_window, one layer each; the longest is full attention), a pool "
                   "per window; reports the same replay with every layer full in the same memory")
      ->delimiter(',')
      ->type_name("W,W,...");
  replay_->add_option("--sink-tokens", sink_tokens_, "--layout: tokens each windowed pool keeps")
      ->capture_default_str();
  replay_
      ->add_option("--disk-admission", disk_admission_,
                   "Embedded: which blocks a full disk tier takes (store.disk_admission)")
      ->check(CLI::IsMember({"all", "min-count", "tinylfu"}))
      ->capture_default_str();
  replay_
      ->add_option("--disk-admission-min-count", disk_admission_min_count_,
                   "Embedded: lookups a block needs under --disk-admission min-count")
      ->capture_default_str();
  replay_
      ->add_option("--data-dir", data_dir_,
                   "Embedded: keep the disk tier here (default: a scratch directory, "
                   "removed afterwards)")
      ->type_name("DIR");
  replay_
      ->add_option("--conversations", conversations_,
                   "Built-in workload: conversations to generate")
      ->capture_default_str();
  replay_
      ->add_option(
          "--one-off-share", one_off_share_,
          "Built-in workload: share of conversations that are one request of blocks no other "
          "request has (batch jobs over unique documents)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  replay_
      ->add_option("--limit", limit_,
                   "Replay only the first N requests (of the trace or workload); 0: all")
      ->type_name("N")
      ->capture_default_str();
  replay_
      ->add_option("--engines", engines_,
                   "Serve the requests by N simulated inference engines that publish KV events "
                   "(ZMQ) to an embedded coordinator, routed by its /v1/route; 0: SDK clients")
      ->check(CLI::Range(0u, 64u))
      ->capture_default_str();
  replay_->add_option("--engine-format", engine_format_, "--engines: their event wire format")
      ->check(CLI::IsMember({"vllm", "sglang", "trtllm"}))
      ->capture_default_str();
  replay_->add_option("--engine-blocks", engine_blocks_, "--engines: each engine's GPU blocks")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  replay_
      ->add_option("--engine-block-tokens", engine_block_tokens_,
                   "--engines: tokens per block (each trace block is one)")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  replay_
      ->add_option("--engine-decode-ms", engine_decode_ms_,
                   "--engines: how long a request runs per output token, for the gateway's "
                   "view of each engine's load; 0: route by prefix alone")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  replay_
      ->add_option("--overlap-weight", overlap_weight_,
                   "--engines: the coordinator's coordinator.overlap_weight (cached blocks "
                   "against running blocks in a route's score)")
      ->check(CLI::Range(0.0, 1000.0))
      ->capture_default_str();
  replay_->add_flag("--json", json_, "Print one JSON object instead of the report");
  replay_->footer(
      "Examples:\n  kvtier replay                                  # built-in chat workload, "
      "embedded cluster\n"
      "  kvtier replay --trace ../shared/traces/conversation_trace.jsonl --json\n"
      "  kvtier replay --connect 127.0.0.1:7400 --token-file kvtier-data/token\n"
      "  kvtier replay --trace ../shared/traces/conversation_trace.jsonl --engines 4\n"
      "  kvtier replay --layout 1024,32768 --block-bytes 8192 --gpu-blocks 4096");
}

// The cluster a replay runs against, and how its clients reach it. Torn down in reverse:
// the cluster stops before the registry it reports to, and its scratch directory goes last.
struct ReplayCommand::Target {
  ~Target() {
    if (cluster) cluster->Shutdown();
  }
  std::optional<ScratchDir> scratch;  // an embedded cluster's data directory made here
  MetricsRegistry registry;
  std::unique_ptr<EmbeddedCluster> cluster;
  client::ClientOptions client;
  std::string summary;
};

Result<std::pair<std::vector<bench::TraceRequest>, std::string>> ReplayCommand::Requests() const {
  std::vector<bench::TraceRequest> requests;
  std::string source;
  if (trace_.empty()) {
    requests = bench::GenerateChatWorkload(
        {.conversations = conversations_, .one_off_share = one_off_share_});
    source = "the built-in chat workload";
    if (one_off_share_ > 0) {
      char share[32];
      std::snprintf(share, sizeof(share), "%g", one_off_share_);
      source += std::string(" (one-off share ") + share + ")";
    }
  } else {
    for (const char* flag : {"--conversations", "--one-off-share"}) {
      if (replay_->count(flag) > 0) {
        return InvalidArgumentError(std::string(flag) +
                                    " shapes the built-in workload, not --trace");
      }
    }
    Result<std::vector<bench::TraceRequest>> read = bench::ReadMooncakeTrace(trace_);
    if (!read.ok()) return InvalidArgumentError("--trace: " + read.status().message());
    requests = std::move(read).value();
    source = std::filesystem::path(trace_).filename().string();
  }
  if (limit_ > 0 && limit_ < requests.size()) {
    source +=
        " (its first " + std::to_string(limit_) + " of " + std::to_string(requests.size()) + ")";
    requests.resize(limit_);
  }
  return std::pair{std::move(requests), std::move(source)};
}

Status ReplayCommand::StartEmbedded(Target& target, bool all_full) const {
  if (data_dir_.empty()) {
    KVTIER_ASSIGN_OR_RETURN(ScratchDir made, ScratchDir::Create("kvtier-replay"));
    target.scratch = std::move(made);
  }
  const std::string data_dir = data_dir_.empty() ? target.scratch->path() : data_dir_;
  EmbeddedShape shape{.gpu_blocks = gpu_blocks_,
                      .host_blocks = host_blocks_,
                      .disk_blocks = disk_blocks_,
                      .block_bytes = block_bytes_,
                      .admission = disk_admission_,
                      .admission_min_count = disk_admission_min_count_,
                      .data_dir = data_dir,
                      .windows = layout_,
                      .sink_tokens = sink_tokens_};
  if (!layout_.empty()) {  // the comparison is of the GPU pools alone
    shape.host_blocks = shape.disk_blocks = 0;
    if (all_full) {
      shape.windows.assign(layout_.size(), 0);
      shape.sink_tokens = 0;
    }
  }
  Result<KvtierConfig> config = EmbeddedConfig(shape);
  if (!config.ok()) return InvalidArgumentError(config.status().message());
  const std::string token = auth::GenerateToken();
  EmbeddedClusterOptions options{
      .config = *config,
      .tokens = auth::TokenStore::SingleTenant(auth::LocalUser("replay"), token).value(),
      .registry = &target.registry,
      .node_id = "replay"};
  Result<std::unique_ptr<EmbeddedCluster>> started = EmbeddedCluster::Create(std::move(options));
  if (!started.ok()) return UnavailableError("embedded cluster: " + started.status().message());
  target.cluster = std::move(started).value();
  target.client.address = target.cluster->endpoints()[0];
  target.client.token = token;
  target.summary = "embedded: " + std::to_string(gpu_blocks_) + " GPU-pool blocks (host memory), " +
                   std::to_string(shape.host_blocks) + " host, " +
                   std::to_string(shape.disk_blocks) + " disk (admission " + disk_admission_ +
                   (disk_admission_ == "min-count" ? " " + std::to_string(disk_admission_min_count_)
                                                   : std::string()) +
                   "), " + std::to_string(block_bytes_) + "-byte blocks";
  return Status::Ok();
}

Status ReplayCommand::UseConnected(Target& target) const {
  for (const char* flag : {"--gpu-blocks", "--host-blocks", "--disk-blocks", "--block-bytes",
                           "--disk-admission", "--disk-admission-min-count", "--data-dir"}) {
    if (replay_->count(flag) > 0) {
      return InvalidArgumentError(
          std::string(flag) +
          " sizes the embedded cluster; with --connect the cluster's own configuration decides");
    }
  }
  Result<std::string> token = auth::TokenFromFlags(target.client.token, token_file_);
  if (!token.ok()) return InvalidArgumentError("--token-file: " + token.status().message());
  target.client.token = *token;
  target.summary = "at " + connect_;
  return Status::Ok();
}

int ReplayCommand::Run() const {
  const auto fail = [](const Status& status) {
    std::fprintf(stderr, "kvtier replay: %s\n", status.message().c_str());
    return status.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  };
  Result<std::pair<std::vector<bench::TraceRequest>, std::string>> requests = Requests();
  if (!requests.ok()) return fail(requests.status());
  if (!coordinator_.empty() && connect_.empty()) {
    return fail(InvalidArgumentError(
        "--coordinator goes with --connect (the embedded cluster has its own)"));
  }
  if (engines_ > 0) return RunFleet(requests->first, requests->second);
  for (const char* flag : {"--engine-format", "--engine-blocks", "--engine-block-tokens",
                           "--engine-decode-ms", "--overlap-weight"}) {
    if (replay_->count(flag) > 0)
      return fail(InvalidArgumentError(std::string(flag) + " goes with --engines"));
  }
  if (Status usage = CheckLayoutFlags(); !usage.ok()) return fail(usage);
  Target target;
  target.client = {.address = connect_,
                   .coordinator_address = coordinator_,
                   .token = token_,
                   .tls_ca_file = tls_ca_file_};
  if (Status ready = connect_.empty() ? StartEmbedded(target) : UseConnected(target); !ready.ok())
    return fail(ready);

  Result<ReplayReport> report = ReplayAgainst(target, requests->first);
  if (!report.ok()) {
    std::fprintf(stderr, "kvtier replay: %s\n", report.status().ToString().c_str());
    return kExitFailure;
  }
  if (!layout_.empty()) {  // the same replay with every layer full, in the same memory
    Target full;
    full.client = target.client;
    if (Status ready = StartEmbedded(full, /*all_full=*/true); !ready.ok()) return fail(ready);
    Result<ReplayReport> all_full = ReplayAgainst(full, requests->first);
    if (!all_full.ok()) {
      std::fprintf(stderr, "kvtier replay: all-full comparison: %s\n",
                   all_full.status().ToString().c_str());
      return kExitFailure;
    }
    report->layout = LayoutComparison{
        .full_block_hit_rate = all_full->block_hit_rate(),
        .full_token_hit_rate = all_full->token_hit_rate(),
        .sequence_kv_saved = SequenceKvSaved(requests->first, bench::kMooncakeTokensPerBlock,
                                             layout_, sink_tokens_)};
  }
  if (const LocalNode* local = target.cluster ? target.cluster->local() : nullptr) {
    if (const std::optional<storage::TieredStoreStats> tiers = local->StoreStats();
        tiers && tiers->disk) {
      report->disk_written_bytes = tiers->disk->bytes_written;
      report->dropped_by_admission = tiers->dropped_by_admission;
    }
  }
  if (json_) {
    std::printf("%s\n", ReplayReportJson(*report).c_str());
  } else {
    std::printf("%s", ReplayReportText(*report, requests->second, target.summary).c_str());
  }
  return 0;
}

Result<ReplayReport> ReplayCommand::ReplayAgainst(
    const Target& target, std::span<const bench::TraceRequest> requests) const {
  ReplayOptions options;
  options.clients = workers_;
  options.connect = [&target] { return client::Client::Connect(target.client); };
  if (!json_ && isatty(STDERR_FILENO)) options.progress = DrawProgress;
  if (!layout_.empty()) {  // chunks of the smallest window, in both runs of a comparison
    const uint32_t window = *std::min_element(layout_.begin(), layout_.end());
    const uint32_t block = bench::kMooncakeTokensPerBlock;
    options.prefill_chunk_blocks = std::max<uint32_t>(1, (window + block - 1) / block);
  }
  return RunReplay(requests, options);
}

Status ReplayCommand::CheckLayoutFlags() const {
  if (layout_.empty()) {
    if (replay_->count("--sink-tokens") > 0)
      return InvalidArgumentError("--sink-tokens goes with --layout (sinks exist in windows)");
    return Status::Ok();
  }
  if (!connect_.empty()) {
    return InvalidArgumentError(
        "--layout shapes the embedded cluster; with --connect the cluster's own "
        "worker.max_attention_window decides");
  }
  for (const char* flag : {"--host-blocks", "--disk-blocks", "--disk-admission",
                           "--disk-admission-min-count", "--data-dir"}) {
    if (replay_->count(flag) > 0) {
      return InvalidArgumentError(std::string(flag) +
                                  " does not go with --layout, which compares the GPU pools alone");
    }
  }
  return Status::Ok();
}

int ReplayCommand::RunFleet(const std::vector<bench::TraceRequest>& requests,
                            const std::string& source) const {
  for (const char* flag :
       {"--connect", "--coordinator", "--token", "--token-file", "--tls-ca-file", "--workers",
        "--gpu-blocks", "--host-blocks", "--disk-blocks", "--block-bytes", "--disk-admission",
        "--disk-admission-min-count", "--data-dir"}) {
    if (replay_->count(flag) > 0) {
      std::fprintf(stderr,
                   "kvtier replay: %s does not go with --engines (the fleet is simulated engines "
                   "and an embedded coordinator)\n",
                   flag);
      return kExitUsage;
    }
  }
  FleetReplayOptions options{.engines = engines_,
                             .engine_blocks = engine_blocks_,
                             .block_tokens = engine_block_tokens_,
                             .format = engine_format_,
                             .decode_ms_per_token = engine_decode_ms_,
                             .overlap_weight = overlap_weight_};
  if (!json_ && isatty(STDERR_FILENO)) options.progress = DrawProgress;
  Result<FleetReplayReport> report = RunFleetReplay(requests, options);
  if (!report.ok()) {
    std::fprintf(stderr, "kvtier replay: %s\n", report.status().ToString().c_str());
    return report.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  }
  if (json_) {
    std::printf("%s\n", FleetReportJson(*report).c_str());
  } else {
    std::printf("replay of %s\n%s", source.c_str(), FleetReportText(*report).c_str());
  }
  return 0;
}

}  // namespace kvtier::cli
