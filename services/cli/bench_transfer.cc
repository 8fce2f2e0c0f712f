// `kvtier bench transfer`: the store's RPC path against Redis and a raw loopback stream.
#include <cstdio>
#include <optional>

#include "services/bench/transfer_baselines.h"
#include "services/cli/bench_command.h"
#include "services/store/rpc/transfer_bench.h"

namespace kvtier::cli {

void BenchCommand::AddTransfer() {
  transfer_ = bench_->add_subcommand(
      "transfer", "Blocks through a store's RPC (put then get, N clients, each its own connection) against a "
                  "raw loopback TCP stream of the same bytes and, with --vs-redis, a Redis server started here.");
  transfer_->add_option("--block-bytes", transfer_block_bytes_, "Bytes per block")
      ->check(CLI::Range(uint64_t{4096}, uint64_t{64} << 20))
      ->capture_default_str();
  transfer_->add_option("--clients", transfer_clients_, "Concurrent clients")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  transfer_->add_option("--total-bytes", transfer_total_bytes_, "Bytes moved in each direction")
      ->check(CLI::Range(uint64_t{4096}, uint64_t{16} << 30))
      ->capture_default_str();
  transfer_->add_option("--batch", transfer_batch_, "Blocks per store call")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  transfer_->add_flag("--vs-redis", vs_redis_, "Also move the blocks through redis-server (hiredis)");
  transfer_->add_flag("--json", json_, "Print one JSON object");
}

int BenchCommand::RunTransfer() const {
  store::TransferBenchOptions options{transfer_block_bytes_, transfer_clients_, transfer_total_bytes_, transfer_batch_};
  const bench::BaselineOptions baseline{transfer_block_bytes_, transfer_clients_, transfer_total_bytes_};
  auto fail = [](const Status& status) {
    std::fprintf(stderr, "kvtier bench transfer: %s\n", status.ToString().c_str());
    return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
  };
  Result<store::TransferBenchResult> store = store::RunStoreTransferBench(options);
  if (!store.ok()) return fail(store.status());
  Result<double> loopback = bench::RunLoopbackBench(baseline);
  if (!loopback.ok()) return fail(loopback.status());
  std::optional<bench::RedisBenchResult> redis;
  if (vs_redis_) {
    Result<bench::RedisBenchResult> r = bench::RunRedisBench(baseline);
    if (!r.ok()) return fail(r.status());
    redis = *r;
  }
  auto or_null = [](bool present, double value) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.3f", value);
    return present ? std::string(text) : std::string("null");
  };
  if (json_) {
    std::printf("{\"bench\":\"transfer\",\"block_bytes\":%llu,\"clients\":%u,\"blocks\":%llu,\"batch\":%u,"
                "\"put_gbps\":%.3f,\"get_gbps\":%.3f,\"loopback_gbps\":%.3f,\"p99_ms\":%.3f,\"put_p99_ms\":%.3f,"
                "\"redis_put_gbps\":%s,\"redis_get_gbps\":%s,\"redis_p99_ms\":%s}\n",
                static_cast<unsigned long long>(options.block_bytes), options.clients,
                static_cast<unsigned long long>(store->blocks), options.batch, store->put.gbps, store->get.gbps,
                *loopback, store->get.p99_ms, store->put.p99_ms, or_null(redis.has_value(), redis ? redis->put_gbps : 0).c_str(),
                or_null(redis.has_value(), redis ? redis->get_gbps : 0).c_str(),
                or_null(redis.has_value(), redis ? redis->get_p99_ms : 0).c_str());
    return 0;
  }
  std::printf("kvtier bench transfer (%llu blocks of %llu bytes, %u clients, %u blocks per call)\n",
              static_cast<unsigned long long>(store->blocks), static_cast<unsigned long long>(options.block_bytes),
              options.clients, options.batch);
  std::printf("  store put   %.3f GB/s (p99 %.2f ms per call)\n", store->put.gbps, store->put.p99_ms);
  std::printf("  store get   %.3f GB/s (p99 %.2f ms per call), %.2f of loopback\n", store->get.gbps,
              store->get.p99_ms, store->get.gbps / *loopback);
  std::printf("  loopback    %.3f GB/s (raw TCP, the ceiling)\n", *loopback);
  if (redis) {
    std::printf("  redis put   %.3f GB/s (store/redis %.2f)\n", redis->put_gbps, store->put.gbps / redis->put_gbps);
    std::printf("  redis get   %.3f GB/s (store/redis %.2f, p99 %.2f ms)\n", redis->get_gbps,
                store->get.gbps / redis->get_gbps, redis->get_p99_ms);
  }
  return 0;
}

}  // namespace kvtier::cli
