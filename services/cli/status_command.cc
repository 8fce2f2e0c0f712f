#include "services/cli/status_command.h"

#include <cstdio>
#include <memory>

#include "services/auth/token_store.h"
#include "services/client/client.h"

namespace kvtier::cli {
namespace {

constexpr int kExitUsage = 2;

// "not served here" for a role the node does not run; the error otherwise.
std::string Absent(const Status& status) {
  return status.code() == StatusCode::kUnavailable ? "not served here" : status.ToString();
}

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void PrintText(const std::string& address, const client::Client& client,
               const Result<client::CoordinatorStats>& coordinator,
               const Result<client::WorkerStats>& worker) {
  std::printf("node         %s (tenant %s)\n", address.c_str(), client.tenant().c_str());
  if (coordinator.ok() && !coordinator->cluster_counts) {
    std::printf("coordinator  %u nodes (the index's counts: node credentials only)\n",
                coordinator->nodes);
  } else if (coordinator.ok()) {
    std::printf(
        "coordinator  %u nodes; index %llu blocks, %llu bytes; %llu lookups; %llu sequence gaps, "
        "%llu "
        "resyncs, %llu lease expiries\n",
        coordinator->nodes, static_cast<unsigned long long>(coordinator->index_blocks),
        static_cast<unsigned long long>(coordinator->index_bytes),
        static_cast<unsigned long long>(coordinator->lookups),
        static_cast<unsigned long long>(coordinator->sequence_gaps),
        static_cast<unsigned long long>(coordinator->resyncs),
        static_cast<unsigned long long>(coordinator->lease_expiries));
  } else {
    std::printf("coordinator  %s\n", Absent(coordinator.status()).c_str());
  }
  if (!worker.ok()) {
    std::printf("worker       %s\n", Absent(worker.status()).c_str());
    return;
  }
  std::string layouts;
  for (const KvLayout& layout : worker->pool_layouts)
    layouts += (layouts.empty() ? "" : ", ") + layout.Fingerprint();
  if (!worker->cluster_counts) {
    std::printf("worker       %zu pools (%s); %u blocks (how full: node credentials only)\n",
                worker->pool_layouts.size(), layouts.c_str(), worker->total_blocks);
    return;
  }
  std::printf(
      "worker       %zu pools (%s); %u blocks: %u in use, %u cached; %llu reuse hits, %llu "
      "evictions, "
      "%llu offloaded, %llu onboarded\n",
      worker->pool_layouts.size(), layouts.c_str(), worker->total_blocks, worker->used_blocks,
      worker->cached_blocks, static_cast<unsigned long long>(worker->reuse_hits),
      static_cast<unsigned long long>(worker->evictions),
      static_cast<unsigned long long>(worker->offloaded_blocks),
      static_cast<unsigned long long>(worker->onboarded_blocks));
}

// One JSON object; a role the node does not run is null.
void PrintJson(const std::string& address, const client::Client& client,
               const Result<client::CoordinatorStats>& coordinator,
               const Result<client::WorkerStats>& worker) {
  std::string out =
      "{\"node\": " + JsonString(address) + ", \"tenant\": " + JsonString(client.tenant());
  out += ", \"coordinator\": ";
  if (coordinator.ok()) {
    out += "{\"nodes\": " + std::to_string(coordinator->nodes) +
           ", \"index_blocks\": " + std::to_string(coordinator->index_blocks) +
           ", \"index_bytes\": " + std::to_string(coordinator->index_bytes) +
           ", \"lookups\": " + std::to_string(coordinator->lookups) +
           ", \"sequence_gaps\": " + std::to_string(coordinator->sequence_gaps) +
           ", \"resyncs\": " + std::to_string(coordinator->resyncs) +
           ", \"lease_expiries\": " + std::to_string(coordinator->lease_expiries) +
           ", \"cluster_counts\": " + (coordinator->cluster_counts ? "true" : "false") + "}";
  } else {
    out += "null";
  }
  out += ", \"worker\": ";
  if (worker.ok()) {
    std::string layouts;
    for (const KvLayout& layout : worker->pool_layouts) {
      layouts += (layouts.empty() ? "" : ", ") + JsonString(layout.Fingerprint());
    }
    out += "{\"pools\": [" + layouts +
           "], \"total_blocks\": " + std::to_string(worker->total_blocks) +
           ", \"used_blocks\": " + std::to_string(worker->used_blocks) +
           ", \"cached_blocks\": " + std::to_string(worker->cached_blocks) +
           ", \"reuse_hits\": " + std::to_string(worker->reuse_hits) +
           ", \"evictions\": " + std::to_string(worker->evictions) +
           ", \"offloaded_blocks\": " + std::to_string(worker->offloaded_blocks) +
           ", \"onboarded_blocks\": " + std::to_string(worker->onboarded_blocks) +
           ", \"cluster_counts\": " + (worker->cluster_counts ? "true" : "false") + "}";
  } else {
    out += "null";
  }
  std::printf("%s}\n", out.c_str());
}

}  // namespace

StatusCommand::StatusCommand(CLI::App& app)
    : status_(app.add_subcommand("status",
                                 "Ask a running node what it serves: the coordinator's index and "
                                 "membership counters, the worker's pools.")) {
  node_.AddTo(*status_, /*connect_required=*/true);
  status_
      ->add_option("--coordinator", coordinator_, "The coordinator, where it is not at --connect")
      ->type_name("ADDR");
  status_->add_flag("--json", json_, "Print one JSON object");
}

int StatusCommand::Run() const {
  client::ClientOptions options;
  options.address = node_.connect;
  options.coordinator_address = coordinator_;
  options.tls_ca_file = node_.tls_ca_file;
  options.tls_server_name = node_.tls_server_name;
  Result<std::string> token = auth::TokenFromFlags(node_.token, node_.token_file);
  if (!token.ok()) {
    std::fprintf(stderr, "kvtier status: --token-file: %s\n", token.status().message().c_str());
    return kExitUsage;
  }
  options.token = *token;
  Result<std::unique_ptr<client::Client>> client = client::Client::Connect(std::move(options));
  if (!client.ok()) {
    std::fprintf(stderr, "kvtier status: %s: %s\n", node_.connect.c_str(),
                 client.status().ToString().c_str());
    return 1;
  }
  const Result<client::CoordinatorStats> coordinator = (*client)->GetCoordinatorStats();
  const Result<client::WorkerStats> worker = (*client)->GetWorkerStats();
  (json_ ? PrintJson : PrintText)(node_.connect, **client, coordinator, worker);
  return 0;
}

}  // namespace kvtier::cli
