#include "common/config_fields.h"

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <type_traits>
#include <utility>

#include "common/kv_layout.h"
#include "common/logging.h"

namespace kvtier::config_internal {
namespace {

std::string Quote(std::string_view v) { return "\"" + std::string(v) + "\""; }

Status OneValue(std::span<const std::string> values) {
  if (values.size() != 1) {
    return InvalidArgumentError("expects a single value, got a list of " +
                                std::to_string(values.size()));
  }
  return Status::Ok();
}

Result<uint64_t> ParseUint(std::string_view text, uint64_t min, uint64_t max) {
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const std::string range = "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (ec == std::errc::result_out_of_range) {
    return InvalidArgumentError(Quote(text) + " is out of range " + range);
  }
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return InvalidArgumentError(Quote(text) + " is not a whole number in " + range);
  }
  if (value < min || value > max)
    return InvalidArgumentError(Quote(text) + " is out of range " + range);
  return value;
}

// Each field names where it lives with a generic accessor, [](auto& c) -> auto& { ... },
// that serves both the setter (mutable config) and the getter (const config).
// A whole number in [min, max], stored in whatever unsigned type the member has.
template <typename Access>
Field UintField(std::string_view path, std::string_view help, uint64_t min, uint64_t max,
                Access member) {
  Field f{path, help, "[" + std::to_string(min) + ", " + std::to_string(max) + "]", false, {}, {}};
  f.set = [member, min, max](KvtierConfig& c, std::span<const std::string> v) -> Status {
    KVTIER_RETURN_IF_ERROR(OneValue(v));
    KVTIER_ASSIGN_OR_RETURN(const uint64_t value, ParseUint(v[0], min, max));
    auto& slot = member(c);
    slot = static_cast<std::remove_reference_t<decltype(slot)>>(value);
    return Status::Ok();
  };
  f.get = [member](const KvtierConfig& c) { return std::to_string(member(c)); };
  return f;
}

// A fraction in (0, 1].
template <typename Access>
Field FractionField(std::string_view path, std::string_view help, Access member) {
  Field f{path, help, "(0, 1]", false, {}, {}};
  f.set = [member](KvtierConfig& c, std::span<const std::string> v) -> Status {
    KVTIER_RETURN_IF_ERROR(OneValue(v));
    double value = 0;
    const auto [end, ec] = std::from_chars(v[0].data(), v[0].data() + v[0].size(), value);
    if (v[0].empty() || ec != std::errc() || end != v[0].data() + v[0].size()) {
      return InvalidArgumentError(Quote(v[0]) + " is not a number in (0, 1]");
    }
    if (!(value > 0 && value <= 1))
      return InvalidArgumentError(Quote(v[0]) + " is out of range (0, 1]");
    member(c) = value;
    return Status::Ok();
  };
  f.get = [member](const KvtierConfig& c) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", member(c));
    return std::string(text);
  };
  return f;
}

template <typename Access>
Field BoolField(std::string_view path, std::string_view help, Access member) {
  Field f{path, help, "true or false", false, {}, {}};
  f.set = [member](KvtierConfig& c, std::span<const std::string> v) -> Status {
    KVTIER_RETURN_IF_ERROR(OneValue(v));
    if (v[0] == "true")
      member(c) = true;
    else if (v[0] == "false")
      member(c) = false;
    else
      return InvalidArgumentError(Quote(v[0]) + " is not a boolean (allowed: true, false)");
    return Status::Ok();
  };
  f.get = [member](const KvtierConfig& c) { return member(c) ? "true" : "false"; };
  return f;
}

// `check` validates a non-empty value; an empty string is allowed when `allow_empty`.
template <typename Access>
Field StringField(std::string_view path, std::string_view help, std::string allowed,
                  bool allow_empty, Access member,
                  std::function<Status(std::string_view)> check = {}) {
  Field f{path, help, std::move(allowed), false, {}, {}};
  f.set = [member, allow_empty, check = std::move(check)](
              KvtierConfig& c, std::span<const std::string> v) -> Status {
    KVTIER_RETURN_IF_ERROR(OneValue(v));
    if (v[0].empty()) {
      if (!allow_empty) return InvalidArgumentError("must not be empty");
    } else if (check) {
      KVTIER_RETURN_IF_ERROR(check(v[0]));
    }
    member(c) = v[0];
    return Status::Ok();
  };
  f.get = [member](const KvtierConfig& c) { return member(c); };
  return f;
}

}  // namespace

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

// A list of strings, each passing `check` (when set); empty items are refused.
template <typename Member>
Field StringListField(std::string_view path, std::string_view help, std::string allowed,
                      Member member, std::function<Status(std::string_view)> check = nullptr) {
  Field f{path, help, std::move(allowed), true, {}, {}};
  f.set = [member, check = std::move(check)](KvtierConfig& c,
                                             std::span<const std::string> v) -> Status {
    std::vector<std::string> items;
    for (const std::string& item : v) {
      if (item.empty()) {
        if (v.size() == 1) break;  // an empty value: an empty list
        return InvalidArgumentError("a list item is empty");
      }
      if (check) KVTIER_RETURN_IF_ERROR(check(item));
      items.push_back(item);
    }
    member(c) = std::move(items);
    return Status::Ok();
  };
  f.get = [member](const KvtierConfig& c) {
    std::string out;
    for (const std::string& item : member(c)) out += (out.empty() ? "" : ",") + item;
    return out;
  };
  return f;
}

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
      "worker.dtype", "Element type of the KV cache.", "one of: fp32, fp16, bf16, fp8_e4m3, int8",
      false, [](auto& c) -> auto& { return c.worker.dtype; },
      [](std::string_view v) -> Status { return ParseDtype(v).status(); }));
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

// The node's host and disk tiers, and `kvtier store`'s serving of them.
void AddStoreFields(std::vector<Field>& fields) {
  fields.push_back(UintField(
      "store.host_cache_bytes", "Host tier capacity (0: no host tier).", 0, 1ull << 44,
      [](auto& c) -> auto& { return c.store.host_cache_bytes; }));
  fields.push_back(UintField(
      "store.data_port",
      "`kvtier store`: TCP port of its data stream, on the listen host (0 picks one; "
      "tickets carry the address).",
      0, 65535, [](auto& c) -> auto& { return c.store.data_port; }));
  fields.push_back(UintField(
      "store.data_stream_threads",
      "`kvtier store`: event loops (threads) serving its data stream's connections; 0: "
      "half the hardware threads, 2 to 8.",
      0, 64, [](auto& c) -> auto& { return c.store.data_stream_threads; }));
  fields.push_back(UintField(
      "store.data_stream_tier_threads",
      "`kvtier store`: threads that run its data stream's disk work (gets of blocks on "
      "disk, puts that write or demote to disk), so that no event loop waits for the "
      "disk; with a disk tier only. 0: as many as the event loops.",
      0, 64, [](auto& c) -> auto& { return c.store.data_stream_tier_threads; }));
  fields.push_back(BoolField(
      "store.data_stream_lend_pages",
      "`kvtier store`: send the host tier's pages zero copy (spliced) to data stream "
      "gets of node sessions, pinned until the reader acks them; false copies them into "
      "the socket, as for tenants.",
      [](auto& c) -> auto& { return c.store.data_stream_lend_pages; }));
  fields.push_back(BoolField(
      "store.data_stream",
      "`kvtier store`: serve the data stream that openGet/openPut tickets name, beside the "
      "RPC (over TLS when tls is set); false: callers use put/get.",
      [](auto& c) -> auto& { return c.store.data_stream; }));
  fields.push_back(StringField(
      "store.disk_admission",
      "Which blocks a full disk tier takes from the host tier (storage/admission.h): all "
      "(its LRU decides who leaves), min-count (blocks requested disk_admission_min_count "
      "times) or tinylfu (a block enters only if requested more often than the disk blocks "
      "it would push out, or of higher priority). `kvtier up` counts lookups, `kvtier "
      "store` its own puts, gets and contains.",
      "one of: all, min-count, tinylfu", false,
      [](auto& c) -> auto& { return c.store.disk_admission; },
      [](std::string_view v) -> Status {
        if (v == "all" || v == "min-count" || v == "tinylfu") return Status::Ok();
        return InvalidArgumentError("\"" + std::string(v) +
                                    "\" is not one of all, min-count, tinylfu");
      }));
  fields.push_back(UintField(
      "store.disk_admission_min_count",
      "Requests a block needs before it may enter a full disk tier, with "
      "disk_admission: min-count.",
      1, 16, [](auto& c) -> auto& { return c.store.disk_admission_min_count; }));
  fields.push_back(UintField(
      "store.host_free_percent",
      "Share of the host tier (percent) that a thread of the node keeps free ahead of "
      "puts by moving its coldest blocks down to the disk tier, so that a put seldom "
      "waits for the disk; with a disk tier only. 0: each put moves down what it "
      "displaces itself.",
      0, 50, [](auto& c) -> auto& { return c.store.host_free_percent; }));
  fields.push_back(UintField(
      "store.disk_bytes", "Disk tier capacity in payload bytes (0: no disk tier).", 0, 1ull << 50,
      [](auto& c) -> auto& { return c.store.disk_bytes; }));
  fields.push_back(StringField(
      "store.disk_sync", "Disk tier durability: what a crash or power loss can lose.",
      "one of: none, wal, fsync", false, [](auto& c) -> auto& { return c.store.disk_sync; },
      [](std::string_view v) -> Status {
        if (v == "none" || v == "wal" || v == "fsync") return Status::Ok();
        return InvalidArgumentError("\"" + std::string(v) + "\" is not one of none, wal, fsync");
      }));
  fields.push_back(StringField(
      "store.listen", "`kvtier store`: host:port its BlockStore serves on (port 0 picks one).",
      "host:port, [ipv6]:port or unix:/path", false,
      [](auto& c) -> auto& { return c.store.listen; }, CheckListenAddress));
  fields.push_back(StringField(
      "store.advertise",
      "`kvtier store`: host:port peers reach it at (a pod's DNS name); empty: the bound "
      "listen address.",
      "host:port", true, [](auto& c) -> auto& { return c.store.advertise; }, CheckListenAddress));
}

// How a worker hands blocks to its tiers, and `kvtier worker`'s serving and write-through.
void AddWorkerNodeFields(std::vector<Field>& fields) {
  fields.push_back(UintField(
      "worker.data_port",
      "`kvtier worker`: TCP port of its BlockStore's data stream, on the listen host (0 "
      "picks one; tickets carry the address).",
      0, 65535, [](auto& c) -> auto& { return c.worker.data_port; }));
  fields.push_back(UintField(
      "worker.data_stream_threads",
      "`kvtier worker`: event loops (threads) serving its data stream's connections; 0: "
      "half the hardware threads, 2 to 8.",
      0, 64, [](auto& c) -> auto& { return c.worker.data_stream_threads; }));
  fields.push_back(UintField(
      "worker.tier_threads",
      "Helper threads that hash and copy each batch of evicted blocks into the node's "
      "tiers, and of onboarded blocks out of them, beside the worker's own thread; 0: half "
      "the hardware threads from 16 up (at most 8), a quarter below (none on up to 3).",
      0, 64, [](auto& c) -> auto& { return c.worker.tier_threads; }));
  fields.push_back(UintField(
      "worker.offload_staging_bytes",
      "Evicted blocks are copied into this much staging and stored into the node's tiers "
      "by a thread of their own, so that an allocation does not wait for the store; "
      "onboards find them there meanwhile. Blocks beyond it are stored before the "
      "allocation returns. 0: every one is; otherwise at least one block of the layout.",
      0, 1ull << 40, [](auto& c) -> auto& { return c.worker.offload_staging_bytes; }));
  fields.push_back(UintField(
      "worker.data_stream_tier_threads",
      "`kvtier worker`: threads that run its data stream's disk work (gets of blocks on "
      "disk, puts that write or demote to disk), so that no event loop waits for the "
      "disk; with a disk tier only. 0: as many as the event loops.",
      0, 64, [](auto& c) -> auto& { return c.worker.data_stream_tier_threads; }));
  fields.push_back(BoolField(
      "worker.data_stream_lend_pages",
      "`kvtier worker`: send its host tier's pages zero copy (spliced) to peers' data "
      "stream gets, pinned until the reader acks them; false copies them into the socket.",
      [](auto& c) -> auto& { return c.worker.data_stream_lend_pages; }));
  fields.push_back(BoolField(
      "worker.data_stream",
      "`kvtier worker`: serve the data stream that peers' openGet tickets name (blocks of "
      "its tiers and pool; over TLS when tls is set); false: peers fetch inline.",
      [](auto& c) -> auto& { return c.worker.data_stream; }));
  fields.push_back(UintField(
      "worker.fetch_stream_min_block_bytes",
      "`kvtier worker`: blocks at least this large are fetched from peers on their data "
      "stream, smaller ones inline in the RPC (the stream was the faster of the two from "
      "64 KiB, the smallest measured); 0: always the stream.",
      0, 1ull << 40, [](auto& c) -> auto& { return c.worker.fetch_stream_min_block_bytes; }));
  fields.push_back(StringField(
      "worker.listen",
      "`kvtier worker`: host:port its Worker and BlockStore serve on (port 0 picks one).",
      "host:port, [ipv6]:port or unix:/path", false,
      [](auto& c) -> auto& { return c.worker.listen; }, CheckListenAddress));
  fields.push_back(StringField(
      "worker.advertise",
      "`kvtier worker`: host:port peers reach it at; empty: the bound listen address.", "host:port",
      true, [](auto& c) -> auto& { return c.worker.advertise; }, CheckListenAddress));
  fields.push_back(StringListField(
      "worker.write_through_stores",
      "`kvtier worker`: node ids of storage nodes (\"<name>/store\" of a `kvtier store`) that "
      "every committed block "
      "worth offloading is also written to, so that it outlives this worker and any node can fetch "
      "it; each block "
      "goes to one of them, chosen by its key (rendezvous hashing: adding a store moves only its "
      "share); empty: none.",
      "a list of node ids", [](auto& c) -> auto& { return c.worker.write_through_stores; }));
  fields.push_back(UintField(
      "worker.write_through_queue_bytes",
      "`kvtier worker`: bytes of blocks that may wait for the write-through store; blocks "
      "beyond it are skipped (the node's own tiers still take them), never waited for. At "
      "least one block of the layout.",
      1ull << 20, 1ull << 40, [](auto& c) -> auto& { return c.worker.write_through_queue_bytes; }));
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
