// `kvtier bench ...`: the component benchmarks. `index` (the coordinator's prefix index over a
// Mooncake trace), `lookup-rpc`, `lookup-http` (the routing API, bench_lookup_http.h), `pool` (the worker's block pool and copy kernels), `disk`
// (the disk tier against raw I/O), `transfer` (blocks through the store's RPC against Redis
// and a raw loopback stream; bench_transfer.cc).
#pragma once

#include <CLI/CLI.hpp>

#include "services/bench/disk_driver.h"
#include "services/bench/pool_driver.h"
#include "services/cli/bench_lookup_http.h"

namespace kvtier::cli {

class BenchCommand {
 public:
  explicit BenchCommand(CLI::App& app);
  bool parsed() const { return bench_->parsed(); }
  // Returns the exit code.
  int Run() const;

 private:
  int RunIndex() const;
  int RunLookupRpc() const;
  int RunLookupHttp() const;
  int RunPool() const;
  int RunDisk() const;
  const char* RawWriteSync() const;
  // Each subcommand with its options.
  void AddIndex();
  void AddLookupRpc();
  void AddLookupHttp();
  void AddPool();
  void AddDisk();
  void AddTransfer();
  int RunTransfer() const;

  CLI::App* bench_;
  CLI::App* index_;
  CLI::App* lookup_rpc_;
  CLI::App* lookup_http_ = nullptr;
  LookupHttpBenchOptions lookup_http_options_;
  CLI::App* pool_;
  bench::PoolBenchOptions pool_options_;
  bench::DiskBenchOptions disk_options_;
  CLI::App* disk_ = nullptr;
  bool force_cpu_ = false;
  double rate_ = 20000;
  double seconds_ = 5;
  uint64_t busy_poll_us_ = 0;
  bool full_answers_ = false;
  CLI::App* transfer_ = nullptr;
  uint64_t transfer_block_bytes_ = uint64_t{256} * 1024;
  uint32_t transfer_clients_ = 8;
  uint64_t transfer_total_bytes_ = 256ull << 20;
  uint32_t transfer_batch_ = 4;
  uint32_t transfer_stream_threads_ = 0;
  std::string transfer_path_ = "both";
  std::string transfer_stream_get_ = "keys";
  uint32_t transfer_gets_in_flight_ = 1;
  bool transfer_lend_pages_ = true;
  std::string transfer_stream_put_ = "keys";
  struct TlsFiles {
    std::string cert_file, key_file, ca_file, server_name;
  } transfer_tls_;
  bool transfer_tls_generate_ = false;  // --tls
  bool vs_redis_ = false;
  std::string trace_;
  uint32_t workers_ = 4;
  uint64_t gpu_blocks_ = 16384;
  uint32_t passes_ = 5;
  uint64_t host_blocks_ = 0;
  uint32_t window_blocks_ = 0;
  uint32_t sink_blocks_ = 0;
  std::string admission_ = "none";
  double overlap_weight_ = 1.0;
  bool json_ = false;
};

}  // namespace kvtier::cli
