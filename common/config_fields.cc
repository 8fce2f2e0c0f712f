#include "common/config_fields.h"

#include <cstdint>
#include <cstdio>
#include <limits>
#include <utility>

#include "common/config_field_kinds.h"
#include "common/kv_layout.h"
#include "common/logging.h"

namespace kvtier::config_internal {

Status CheckListenAddress(std::string_view address) {
  if (address.starts_with("unix:")) {
    if (address.size() == 5) return InvalidArgumentError(Quote(address) + " names no socket path");
    return Status::Ok();
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return InvalidArgumentError(Quote(address) +
                                " is not an address (allowed: host:port, [ipv6]:port, unix:/path)");
  }
  const Result<uint64_t> port = ParseUint(address.substr(colon + 1), 0, 65535);
  if (!port.ok())
    return InvalidArgumentError(Quote(address) + " has a bad port: " + port.status().message());
  return Status::Ok();
}

namespace {

Field ListenField() {
  return StringListField(
      "coordinator.listen", "Addresses the coordinator RPC listens on.",
      "a list of host:port, [ipv6]:port or unix:/path",
      [](auto& c) -> auto& { return c.coordinator.listen; }, CheckListenAddress);
}

// The worker's KV layout and pool (`kvtier up`'s embedded worker and `kvtier worker`).
void AddPoolFields(std::vector<Field>& fields) {
  fields.push_back(UintField(
      "worker.num_layers", "Model layers in each KV block.", 1, 1024,
      [](auto& c) -> auto& { return c.worker.num_layers; }));
  fields.push_back(UintField(
      "worker.num_kv_heads", "KV heads per layer.", 1, 1024,
      [](auto& c) -> auto& { return c.worker.num_kv_heads; }));
  fields.push_back(UintField(
      "worker.head_dim", "Elements per head.", 1, 4096,
      [](auto& c) -> auto& { return c.worker.head_dim; }));
  fields.push_back(UintField(
      "worker.tokens_per_block", "Tokens per KV block (a power of two).", 2, 4096,
      [](auto& c) -> auto& { return c.worker.tokens_per_block; }));
  fields.push_back(StringField(
      "worker.dtype", "Element type of the KV cache (int8, int4, fp8_e4m3: quantized per token).",
      "one of: fp32, fp16, bf16, fp8_e4m3, int8, int4",
      false, [](auto& c) -> auto& { return c.worker.dtype; },
      [](std::string_view v) -> Status { return ParseDtype(v).status(); }));
  fields.push_back(UintListField(
      "worker.max_attention_window",
      "Each layer's attention window in tokens, repeated over the layers (TensorRT-LLM's "
      "max_attention_window): one pool per distinct window. Empty: full attention.",
      0, 1u << 24, [](auto& c) -> auto& { return c.worker.max_attention_window; }));
  fields.push_back(UintField(
      "worker.sink_tokens",
      "Windowed pools: tokens at the start of each sequence that never leave the window.", 0,
      1u << 20, [](auto& c) -> auto& { return c.worker.sink_tokens; }));
  fields.push_back(UintField(
      "worker.pool_bytes", "Host-memory pool budget when there is no GPU.", 1ull << 16, 1ull << 44,
      [](auto& c) -> auto& { return c.worker.pool_bytes; }));
  fields.push_back(FractionField(
      "worker.free_memory_fraction",
      "Share of the free GPU memory (or of worker.pool_bytes without a GPU) for KV blocks.",
      [](auto& c) -> auto& { return c.worker.free_memory_fraction; }));
  fields.push_back(UintField(
      "worker.max_tokens",
      "Cap the pool at the blocks this many tokens need (0: no cap); with "
      "free_memory_fraction, the smaller wins.",
      0, 1ull << 40, [](auto& c) -> auto& { return c.worker.max_tokens; }));
  fields.push_back(UintField(
      "worker.secondary_offload_min_priority",
      "Evicted blocks of at least this priority move to the host tier; others are dropped.", 0, 100,
      [](auto& c) -> auto& { return c.worker.secondary_offload_min_priority; }));
}

// A separate node's name and its coordinator (`kvtier worker`, `kvtier store`).
void AddNodeIdentityFields(std::vector<Field>& fields) {
  fields.push_back(StringField(
      "node.name",
      "`kvtier worker`, `kvtier store`: the node's name at the coordinator, stable across "
      "restarts; empty: the host name.",
      "a name", true, [](auto& c) -> auto& { return c.node.name; }));
  fields.push_back(StringField(
      "node.coordinator", "`kvtier worker`, `kvtier store`: the coordinator to register with.",
      "host:port, [ipv6]:port or unix:/path", false,
      [](auto& c) -> auto& { return c.node.coordinator; }, CheckListenAddress));
  fields.push_back(StringField(
      "node.coordinator_token_file",
      "`kvtier worker`, `kvtier store`: file whose first line is the node's token at the "
      "coordinator and its peers (a node credential: the nodes: section of auth.token_file).",
      "a file path", true, [](auto& c) -> auto& { return c.node.coordinator_token_file; }));
}

// connections.*: what every RPC listener allows before a client authenticates.
void AddConnectionFields(std::vector<Field>& fields) {
  fields.push_back(UintField(
      "connections.auth_deadline_ms",
      "A connection that has not authenticated this long after its accept (TLS handshake "
      "included) is closed.",
      100, 600000, [](auto& c) -> auto& { return c.connections.auth_deadline_ms; }));
  fields.push_back(UintField(
      "connections.pre_auth_message_bytes",
      "Largest RPC message accepted before the connection authenticates.", 4096, 1ull << 30,
      [](auto& c) -> auto& { return c.connections.pre_auth_message_bytes; }));
  fields.push_back(UintField(
      "connections.max",
      "Open connections per listener; past it the oldest unauthenticated one is closed "
      "for a newcomer. 0: half of the descriptor limit (RLIMIT_NOFILE).",
      0, 1u << 20, [](auto& c) -> auto& { return c.connections.max; }));
  fields.push_back(UintField(
      "connections.data_stream_max",
      "Open connections of a node's data stream; past it new ones are refused, and one "
      "that shows no valid ticket within its client timeout is closed. 0: a quarter of the "
      "descriptor limit (RLIMIT_NOFILE).",
      0, 1u << 20, [](auto& c) -> auto& { return c.connections.data_stream_max; }));
  fields.push_back(UintField(
      "connections.max_unauthenticated",
      "Unauthenticated connections per listener; past it the oldest is closed for a newcomer.", 1,
      1u << 20, [](auto& c) -> auto& { return c.connections.max_unauthenticated; }));
  fields.push_back(UintField(
      "connections.max_unauthenticated_per_address",
      "Unauthenticated connections from one address; past it new ones are refused.", 1, 1u << 20,
      [](auto& c) -> auto& { return c.connections.max_unauthenticated_per_address; }));
  fields.push_back(UintField(
      "connections.auth_failure_burst",
      "Failed authentications one address may have at once before it must wait.", 1, 1u << 20,
      [](auto& c) -> auto& { return c.connections.auth_failure_burst; }));
  fields.push_back(UintField(
      "connections.auth_failures_per_minute",
      "How fast an address's budget of failed authentications refills; while it is spent, "
      "its tokens are not checked.",
      1, 1u << 20, [](auto& c) -> auto& { return c.connections.auth_failures_per_minute; }));
}

std::vector<Field> BuildFields() {
  std::vector<Field> fields;
  fields.push_back(StringField(
      "data_dir", "Directory for persistent data (RocksDB, state).", "a directory path", false,
      [](auto& c) -> auto& { return c.data_dir; }));
  fields.push_back(StringField(
      "log.level", "Log verbosity.", "one of: trace, debug, info, warn, error, off", false,
      [](auto& c) -> auto& { return c.log.level; },
      [](std::string_view v) -> Status { return ParseLogLevel(v).status(); }));
  fields.push_back(StringField(
      "metrics.bind", "IP address the /metrics, /healthz, /readyz endpoint binds.",
      "an IPv4 or IPv6 address", false, [](auto& c) -> auto& { return c.metrics.bind; }));
  fields.push_back(UintField(
      "metrics.port", "Port of the HTTP endpoint; 0 picks a free one.", 0, 65535,
      [](auto& c) -> auto& { return c.metrics.port; }));
  fields.push_back(BoolField(
      "auth.enabled", "Require a tenant token on every RPC connection.",
      [](auto& c) -> auto& { return c.auth.enabled; }));
  fields.push_back(StringField(
      "auth.token_file", "YAML file of tenants, engines, nodes and their tokens.", "a file path",
      true, [](auto& c) -> auto& { return c.auth.token_file; }));
  fields.push_back(UintField(
      "auth.reload_interval_ms",
      "How often the token file is checked for changes and reloaded; a session whose "
      "token the new file revokes fails its next call. 0: read once at start.",
      0, 3600000, [](auto& c) -> auto& { return c.auth.reload_interval_ms; }));
  fields.push_back(StringField(
      "tls.cert_file", "Server certificate chain (PEM); enables TLS.", "a file path", true,
      [](auto& c) -> auto& { return c.tls.cert_file; }));
  fields.push_back(StringField(
      "tls.key_file", "Server private key (PEM).", "a file path", true,
      [](auto& c) -> auto& { return c.tls.key_file; }));
  fields.push_back(StringField(
      "tls.ca_file", "CA bundle clients verify servers against (PEM).", "a file path", true,
      [](auto& c) -> auto& { return c.tls.ca_file; }));
  fields.push_back(ListenField());
  fields.push_back(StringField(
      "coordinator.unix_socket", "Unix socket path the coordinator also listens on.", "a file path",
      true, [](auto& c) -> auto& { return c.coordinator.unix_socket; }));
  fields.push_back(UintField(
      "coordinator.max_message_bytes",
      "Largest RPC message accepted; larger ones close the connection.", 4096, 1ull << 30,
      [](auto& c) -> auto& { return c.coordinator.max_message_bytes; }));
  fields.push_back(UintField(
      "coordinator.lease_ttl_ms",
      "Node lease: a node that sends no heartbeat for this long leaves the index.", 500, 3600000,
      [](auto& c) -> auto& { return c.coordinator.lease_ttl_ms; }));
  fields.push_back(UintField(
      "coordinator.busy_poll_us",
      "After each call the RPC thread polls without sleeping this long (microseconds): "
      "lower latency under load for one busy core while calls flow; 0: off.",
      0, 10000, [](auto& c) -> auto& { return c.coordinator.busy_poll_us; }));
  fields.push_back(UintField(
      "coordinator.max_index_blocks",
      "Most blocks the prefix index holds (about 64 bytes each); stored events past it "
      "are left out of lookups and counted.",
      1024, CoordinatorConfig{}.max_index_blocks,
      [](auto& c) -> auto& { return c.coordinator.max_index_blocks; }));
  fields.push_back(UintField(
      "coordinator.orphan_wait_ms",
      "How long a stored block whose parent no node holds waits for another node's event "
      "to bring the parent (two nodes' streams arrive in no common order); then it is "
      "left out of lookups and counted. 0: left out at once.",
      0, 60000, [](auto& c) -> auto& { return c.coordinator.orphan_wait_ms; }));
  fields.push_back(NumberField(
      "coordinator.overlap_weight",
      "Routing cost of one block to prefill against one active block of the candidate's "
      "load: higher keeps prompts where their prefix is cached, lower balances load.",
      0, 1000, [](auto& c) -> auto& { return c.coordinator.overlap_weight; }));
  fields.push_back(UintField(
      "coordinator.routed_load_half_life_ms",
      "Engines report no load: a route with no candidate_active_blocks counts what this "
      "coordinator routed to each engine, halving every this long; 0: engines count as idle.",
      0, 3600000, [](auto& c) -> auto& { return c.coordinator.routed_load_half_life_ms; }));
  fields.push_back(UintField(
      "coordinator.engine_discovery_interval_ms",
      "How often engines of discovery: dns resolve their host again (a Service's pods come "
      "and go).",
      100, 3600000, [](auto& c) -> auto& { return c.coordinator.engine_discovery_interval_ms; }));
  AddEngineFields(fields);
  AddConnectionFields(fields);
  AddPoolFields(fields);
  AddStoreFields(fields);
  AddWorkerNodeFields(fields);
  AddNodeIdentityFields(fields);
  return fields;
}

}  // namespace

const std::vector<Field>& Fields() {
  static const std::vector<Field> fields = BuildFields();
  return fields;
}

const Field* FindField(std::string_view path) {
  for (const Field& f : Fields()) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

}  // namespace kvtier::config_internal
