// StartNodeDataStream: the data stream (services/store/stream) of a node that serves a
// BlockStore (`kvtier store`, `kvtier worker`), set up from its configuration.
//
// The stream listens on the host of the node's RPC listener (`port`, 0: a free one) and
// tells clients, in each ticket, the host they reach the node at (the advertised
// address's, else the listener's). With TLS configured the stream runs TLS with the
// node's certificate (clients verify it as they verify the node's RPC). None is started
// (nullptr) when it is turned off or when the node listens on a unix socket.
//
// Thread safety: a function of its inputs. Ownership: the store and the registry outlive
// the stream.
#pragma once

#include <memory>
#include <string>

#include "common/config.h"
#include "common/metrics.h"
#include "services/store/stream/data_stream_server.h"

namespace kvtier::store {

struct NodeDataStreamOptions {
  bool enabled = true;
  std::string listen;     // the node's RPC listener, host:port
  std::string advertise;  // where peers reach the node's RPC; empty: `listen`
  // Set both: the stream runs TLS with this certificate chain and key (the node's RPC's).
  std::string tls_cert_file = {};
  std::string tls_key_file = {};
  uint32_t port = 0;
  uint32_t threads = 0;                    // the stream's event loops; 0: its default
  uint32_t tier_threads = 0;               // its disk work's threads; 0: its default
  bool lend_pages = true;                  // DataStreamServerOptions::lend_pages
  uint32_t max_connections = 0;            // DataStreamServerOptions::max_connections
  uint32_t max_unproven_per_address = 64;  // and ::max_unproven_per_address
  std::chrono::milliseconds first_request_deadline{5'000};  // and ::first_request_deadline
  storage::TieredStore* store = nullptr;                    // required
  MetricsRegistry* registry = nullptr;                      // optional
};

// nullptr when no stream is to run; errors as DataStreamServer::Create, and
// kInvalidArgument naming a TLS file that cannot be used.
[[nodiscard]] Result<std::unique_ptr<DataStreamServer>> StartNodeDataStream(
    const NodeDataStreamOptions& options);

// The options from a node's configuration section (config.store or config.worker: each
// has listen, advertise, data_stream, data_port, data_stream_threads,
// data_stream_tier_threads and data_stream_lend_pages) and the cluster's TLS setting.
template <typename NodeSection>
NodeDataStreamOptions NodeDataStreamOptionsFrom(const NodeSection& section,
                                                const KvtierConfig& config,
                                                storage::TieredStore* store,
                                                MetricsRegistry* registry) {
  return {.enabled = section.data_stream,
          .listen = section.listen,
          .advertise = section.advertise,
          .tls_cert_file = config.tls.cert_file,
          .tls_key_file = config.tls.key_file,
          .port = section.data_port,
          .threads = section.data_stream_threads,
          .tier_threads = section.data_stream_tier_threads,
          .lend_pages = section.data_stream_lend_pages,
          .max_connections = config.connections.data_stream_max,
          .max_unproven_per_address = config.connections.max_unauthenticated_per_address,
          .first_request_deadline = std::chrono::milliseconds(config.connections.auth_deadline_ms),
          .store = store,
          .registry = registry};
}

}  // namespace kvtier::store
