// `kvtier replay`: a Mooncake-format trace (or the built-in chat workload) replayed
// through the real RPC against a running cluster (--connect) or, by default, against an
// embedded one sized by --gpu-blocks, --host-blocks and --disk-blocks (services/cli/replay.h);
// with --engines N, served by a fleet of simulated engines publishing KV events to a
// coordinator that routes them (services/cli/fleet_replay.h).
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/status.h"
#include "services/bench/trace.h"
#include "services/cli/replay.h"

namespace kvtier::cli {

class ReplayCommand {
 public:
  explicit ReplayCommand(CLI::App& app);
  bool parsed() const { return replay_->parsed(); }
  // Returns the exit code: 0, 1 (the cluster failed), 2 (bad usage or trace).
  int Run() const;

 private:
  struct Target;
  // The requests to replay and where they come from (the trace's file name or the
  // built-in workload). Errors here and in the two below are kInvalidArgument for bad
  // usage (exit 2), others for a cluster that failed (exit 1).
  Result<std::pair<std::vector<bench::TraceRequest>, std::string>> Requests() const;
  // `all_full`: the --layout comparison's cluster, every layer at full attention.
  Status StartEmbedded(Target& target, bool all_full = false) const;
  // One replay against `target` (its clients from `target.client`).
  Result<ReplayReport> ReplayAgainst(const Target& target,
                                     std::span<const bench::TraceRequest> requests) const;
  Status UseConnected(Target& target) const;
  // --layout's flags: embedded only, without host and disk tiers (it compares pools).
  Status CheckLayoutFlags() const;
  // --engines: the fleet replay (fleet_replay.h) instead of the SDK clients' one.
  int RunFleet(const std::vector<bench::TraceRequest>& requests, const std::string& source) const;

  CLI::App* replay_;
  std::string trace_;
  std::string connect_;
  std::string coordinator_;
  std::string token_;
  std::string token_file_;
  std::string tls_ca_file_;
  uint32_t workers_ = 1;
  uint64_t gpu_blocks_ = 16384;
  uint64_t host_blocks_ = 65536;
  uint64_t disk_blocks_ = 262144;
  uint64_t block_bytes_ = 4096;
  std::vector<uint32_t> layout_;  // --layout: per-layer attention windows; empty: one full layer
  uint32_t sink_tokens_ = 0;
  std::string disk_admission_ = "all";
  uint32_t disk_admission_min_count_ = 2;
  std::string data_dir_;
  uint32_t conversations_ = 600;
  double one_off_share_ = 0;
  uint64_t limit_ = 0;    // requests replayed: the first ones; 0: all
  uint32_t engines_ = 0;  // a fleet of simulated engines; 0: SDK clients
  std::string engine_format_ = "vllm";
  uint64_t engine_blocks_ = 16384;
  uint32_t engine_block_tokens_ = 16;
  double engine_decode_ms_ = 20.0;
  double overlap_weight_ = 1.0;
  bool json_ = false;
};

}  // namespace kvtier::cli
