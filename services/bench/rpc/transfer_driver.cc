#include "services/bench/rpc/transfer_driver.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "common/thread_cpu.h"
#include "services/bench/rpc/transfer_client.h"
#include "services/rpc/rpc_server.h"
#include "services/rpc/session_service.h"
#include "services/store/rpc/store_service.h"
#include "services/store/stream/data_stream_client.h"
#include "services/store/stream/data_stream_server.h"

namespace kvtier::bench {
namespace {

using store::DataStreamClient;
using store::DataStreamServer;
using store::MakeBlockStoreService;
using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1,
                         static_cast<size_t>(q * static_cast<double>(values.size())))];
}

// The threads' CPU now; empty where /proc cannot be read (the cores then read 0).
std::vector<ThreadCpu> SampleCpu() { return ReadThreadCpu().value_or(std::vector<ThreadCpu>{}); }

// One phase's figures from its clients' call times (`ms`), open times and the CPU samples
// taken at its start and end.
TransferPhase Summarize(uint64_t bytes, Clock::duration wall, std::vector<double> ms,
                        double open_ms, const std::vector<ThreadCpu>& cpu_start,
                        const std::vector<ThreadCpu>& cpu_end) {
  const double seconds = std::chrono::duration<double>(wall).count();
  TransferPhase phase;
  phase.gbps = static_cast<double>(bytes) / seconds / 1e9;
  double call_ms = 0;
  for (const double m : ms) call_ms += m;
  phase.open_share = call_ms > 0 ? open_ms / call_ms : 0;
  phase.p50_ms = Percentile(ms, 0.5);
  phase.p99_ms = Percentile(std::move(ms), 0.99);
  phase.cores = {.control = CpuSecondsBetween(cpu_start, cpu_end, "bench-store") / seconds,
                 .stream = CpuSecondsBetween(cpu_start, cpu_end, "kvt-stream") / seconds,
                 .clients = CpuSecondsBetween(cpu_start, cpu_end, "bench-client") / seconds};
  return phase;
}

// The node the clients call: a host tier that holds every block, its BlockStore over
// Cap'n Proto and, with o.stream, its data stream. Destroyed in reverse: server first.
struct BenchNode {
  std::unique_ptr<storage::TieredStore> store;
  std::unique_ptr<DataStreamServer> stream;
  auth::TokenStore tokens = auth::TokenStore::Disabled();
  rpc::SessionContext session;
  std::unique_ptr<rpc::RpcServer> server;
};

Result<std::unique_ptr<BenchNode>> StartNode(const TransferBenchOptions& o, uint64_t blocks) {
  auto node = std::make_unique<BenchNode>();
  storage::TieredStoreOptions store_options;
  store_options.host.emplace();
  store_options.host->capacity_bytes = (blocks + 16) * ((o.block_bytes + 65535) / 65536 * 65536);
  KVTIER_ASSIGN_OR_RETURN(node->store, storage::TieredStore::Create(std::move(store_options)));
  if (o.stream) {
    TlsContextPtr tls;
    if (o.tls()) {
      KVTIER_ASSIGN_OR_RETURN(tls, MakeTlsServerContext(o.tls_cert_file, o.tls_key_file));
    }
    KVTIER_ASSIGN_OR_RETURN(
        node->stream,
        DataStreamServer::Create(
            {.store = node->store.get(),
             .max_staged_bytes = 2 * o.block_bytes * o.batch * o.clients + (64ull << 20),
             .max_block_bytes = o.block_bytes,
             .threads = o.stream_threads,
             .lend_pages = o.lend_pages,
             .tls = std::move(tls)}));
  }
  BenchNode* n = node.get();
  n->session.identity = {"bench-store", {"store"}};
  n->session.tokens = &n->tokens;
  n->session.clock = &SystemClock::Instance();
  n->session.store = [n, &o](const auth::Tenant& tenant) {
    return MakeBlockStoreService(
        {.store = n->store.get(),
         .stream = n->stream.get(),
         .limits = {.max_block_bytes = o.block_bytes, .max_blocks_per_call = o.batch}},
        tenant);
  };
  rpc::RpcServerOptions server_options;
  server_options.listen = {"127.0.0.1:0"};
  server_options.thread_name = "bench-store";
  server_options.max_message_bytes = o.block_bytes * o.batch * 2 + (1 << 20);
  server_options.tls_cert_file = o.tls_cert_file;
  server_options.tls_key_file = o.tls_key_file;
  KVTIER_ASSIGN_OR_RETURN(n->server, rpc::RpcServer::Create(std::move(server_options),
                                                            rpc::SessionBootstraps(n->session)));
  return node;
}

// When each timed phase started and ended, and the threads' CPU at those moments.
struct PhaseMarks {
  Clock::time_point put_start, put_end, get_start, get_end;
  std::vector<ThreadCpu> cpu_put_start, cpu_put_end, cpu_get_end;
};

// Runs one thread per client through put, the timed get and the verify pass (RunClient),
// opening each phase when every client is ready for it.
PhaseMarks DrivePhases(const std::string& endpoint, const TransferBenchOptions& o,
                       std::vector<ClientWork>& work) {
  Phases phases;
  std::vector<std::thread> threads;
  threads.reserve(work.size());
  for (ClientWork& w : work)
    threads.emplace_back(RunTransferClient, endpoint, std::cref(o), std::ref(w), std::ref(phases));
  const auto clients = static_cast<int>(work.size());
  PhaseMarks marks;
  Phases::WaitFor(phases.ready, clients);
  marks.cpu_put_start = SampleCpu();
  marks.put_start = Clock::now();
  Phases::Open(phases.go_put);
  Phases::WaitFor(phases.put_done, clients);
  marks.put_end = Clock::now();
  marks.cpu_put_end = SampleCpu();
  marks.get_start = Clock::now();
  Phases::Open(phases.go_get);
  Phases::WaitFor(phases.get_done, clients);
  marks.get_end = Clock::now();
  marks.cpu_get_end = SampleCpu();
  Phases::Open(phases.go_verify);
  for (std::thread& t : threads) t.join();
  return marks;
}

}  // namespace

Result<TransferBenchResult> RunStoreTransferBench(const TransferBenchOptions& o) {
  const uint64_t blocks = o.total_bytes / o.block_bytes;
  if (o.clients == 0 || o.batch == 0 || blocks < o.clients) {
    return InvalidArgumentError(
        "--total-bytes must give every client at least one block of --block-bytes");
  }
  if (o.tls() && (o.tls_key_file.empty() || o.tls_ca_file.empty() || o.tls_server_name.empty())) {
    return InvalidArgumentError(
        "TLS needs a certificate, its key, the CA and the server name together");
  }
  if (o.gets_in_flight == 0 || o.gets_in_flight > DataStreamClient::kMaxGetsInFlight) {
    return InvalidArgumentError("--stream-gets-in-flight " + std::to_string(o.gets_in_flight) +
                                ": it takes 1 to " +
                                std::to_string(DataStreamClient::kMaxGetsInFlight));
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<BenchNode> node, StartNode(o, blocks));
  std::vector<ClientWork> work(o.clients);
  for (uint32_t c = 0; c < o.clients; ++c) {
    work[c].index = c;
    work[c].first_block = blocks * c / o.clients;
    work[c].blocks = blocks * (c + 1) / o.clients - work[c].first_block;
  }
  const PhaseMarks marks = DrivePhases(node->server->endpoints()[0], o, work);
  node->server->Shutdown();

  std::vector<double> put_ms, get_ms;
  double put_open_ms = 0, get_open_ms = 0;
  for (const ClientWork& w : work) {
    if (!w.error.empty())
      return InternalError("client " + std::to_string(w.index) + ": " + w.error);
    put_ms.insert(put_ms.end(), w.put_ms.begin(), w.put_ms.end());
    get_ms.insert(get_ms.end(), w.get_ms.begin(), w.get_ms.end());
    put_open_ms += w.put_open_ms;
    get_open_ms += w.get_open_ms;
  }
  const uint64_t bytes = blocks * o.block_bytes;
  return TransferBenchResult{
      .put = Summarize(bytes, marks.put_end - marks.put_start, std::move(put_ms), put_open_ms,
                       marks.cpu_put_start, marks.cpu_put_end),
      .get = Summarize(bytes, marks.get_end - marks.get_start, std::move(get_ms), get_open_ms,
                       marks.cpu_put_end, marks.cpu_get_end),
      .blocks = blocks};
}

}  // namespace kvtier::bench
