#include "services/store/rpc/node_data_stream.h"

namespace kvtier::store {
namespace {

// The host of an RPC address ("host:port", "[v6]:port"); the whole text when it has no port.
std::string HostOf(const std::string& address) {
  const std::optional<HostPort> split = SplitHostPort(address);
  return split ? split->host : address;
}

}  // namespace

Result<std::unique_ptr<DataStreamServer>> StartNodeDataStream(
    const NodeDataStreamOptions& options) {
  if (!options.enabled || options.listen.starts_with("unix:"))
    return std::unique_ptr<DataStreamServer>();
  DataStreamServerOptions stream;
  if (!options.tls_cert_file.empty() || !options.tls_key_file.empty()) {
    KVTIER_ASSIGN_OR_RETURN(stream.tls,
                            MakeTlsServerContext(options.tls_cert_file, options.tls_key_file));
  }
  stream.store = options.store;
  stream.bind_host = HostOf(options.listen);
  stream.port = static_cast<uint16_t>(options.port);
  stream.advertise_host = options.advertise.empty() ? std::string() : HostOf(options.advertise);
  stream.registry = options.registry;
  stream.threads = options.threads;
  stream.tier_threads = options.tier_threads;
  stream.lend_pages = options.lend_pages;
  stream.max_connections = options.max_connections;
  stream.max_unproven_per_address = options.max_unproven_per_address;
  stream.first_request_deadline = options.first_request_deadline;
  return DataStreamServer::Create(std::move(stream));
}

}  // namespace kvtier::store
