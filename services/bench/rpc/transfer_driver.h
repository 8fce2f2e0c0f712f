// The store half of `kvtier bench transfer`: blocks through the BlockStore capability.
//
// Starts a store in this process (a host tier big enough for every block, an RPC server
// on 127.0.0.1 with auth off) and `clients` client threads, each with its own connection
// and event loop. Put phase: every client puts its share of blocks, `batch` blocks per
// call, payloads inline or on the data stream (checksums computed before the clock starts,
// as a block's header
// travels with it from the tier that made it); get phase: every client reads its blocks
// back, checking state and size as the Redis phase does; then, untimed, every block is
// read again and compared byte for byte, once every client has finished the timed pass.
// Rates are payload bytes over the wall time of the phase; latencies are per call.
//
// Thread safety: a function of its inputs.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace kvtier::bench {

struct TransferBenchOptions {
  uint64_t block_bytes = uint64_t{256} * 1024;
  uint32_t clients = 8;
  uint64_t total_bytes = 256ull << 20;  // per phase, over all clients
  uint32_t batch = 4;                   // blocks per call
  // false: payloads inline in put/get; true: openPut/openGet on Cap'n Proto and the
  // payloads on the store's data stream (services/store/stream), one stream connection
  // per client.
  bool stream = false;
  uint32_t stream_threads = 0;  // the data stream's event loops; 0: its default
  // The data stream's gets: true, keyed gets under one get session per client
  // (openGetSession once, then the keys on the stream); false, an openGet per get.
  bool keyed_gets = true;
  // Keyed gets each client keeps sent ahead of the reply it reads (1: one at a time; up to
  // DataStreamClient::kMaxGetsInFlight). A get's time runs from its send to its reply.
  uint32_t gets_in_flight = 1;
  // The data stream's puts: true, keyed puts under one put session per client
  // (openPutSession once, then the headers on the stream); false, an openPut per put.
  bool keyed_puts = true;
  // The data stream's gets lend the host tier's pages (DataStreamServerOptions::lend_pages).
  bool lend_pages = true;
  // All four set: the store's RPC listener and its data stream serve TLS with this
  // certificate and key, and the clients verify both against the CA for `tls_server_name`.
  std::string tls_cert_file = {};
  std::string tls_key_file = {};
  std::string tls_ca_file = {};
  std::string tls_server_name = {};
  bool tls() const { return !tls_cert_file.empty(); }
};

// Where a phase's CPU went, in cores (CPU seconds over the phase's wall time).
struct TransferCores {
  double control = 0;  // the store's RPC thread (Cap'n Proto: calls, and inline payloads)
  double stream = 0;   // the store's data stream loops
  double clients = 0;  // the client threads
};

struct TransferPhase {
  double gbps = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  TransferCores cores;
  // The data stream path: the share of a call's time spent waiting for its Cap'n Proto
  // open (openPut/openGet; a keyed transfer's one session open) before the bytes moved. 0
  // on the inline path.
  double open_share = 0;
};

struct TransferBenchResult {
  TransferPhase put;
  TransferPhase get;
  uint64_t blocks = 0;
};

[[nodiscard]] Result<TransferBenchResult> RunStoreTransferBench(
    const TransferBenchOptions& options);

}  // namespace kvtier::bench
