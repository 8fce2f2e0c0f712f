// Configuration of a kvtier process: one YAML file, environment overrides, flags.
//
// Every setting has a dotted path ("metrics.port") and is declared once in a schema
// (config_fields.cc) with its type, allowed range and help. The same schema drives the
// three sources, so they accept the same values and fail with the same words:
//
//   YAML        metrics: {port: 9400}          (unknown keys are errors)
//   environment KVTIER_METRICS_PORT=9400       (path upper-cased, '.' -> '_')
//   flag        --metrics-port 9400            (path with '.' and '_' -> '-')
//
// Precedence: defaults < YAML file < environment < flags. Lists (coordinator.listen) are
// YAML sequences, or comma-separated in the environment and on flags. Environment
// variables that start with KVTIER_ but name no setting are ignored, because Kubernetes
// injects KVTIER_SERVICE_HOST-style variables for a Service named "kvtier"; the
// deployment sets enableServiceLinks: false so that they cannot shadow a setting.
//
// Every error is kInvalidArgument and names the source, the setting and what is allowed:
//   "flag --metrics-port: metrics.port: \"70000\" is out of range [0, 65535]".
//
// Thread safety: pure functions over values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/block_vocabulary.h"
#include "common/kv_layout.h"
#include "common/status.h"

namespace kvtier {

struct LogConfig {
  std::string level = "info";
};

struct MetricsConfig {
  std::string bind = "0.0.0.0";
  uint16_t port = 9400;
};

struct AuthConfig {
  bool enabled = true;
  std::string token_file;  // YAML list of tenants; see services/auth/token_store.h
  // How often the token file is checked for changes (then reloaded; services/auth/
  // token_store.h); 0: read once at start.
  uint64_t reload_interval_ms = 1000;
};

struct TlsConfig {
  std::string cert_file;  // server certificate chain (PEM); with key_file enables TLS
  std::string key_file;   // server private key (PEM)
  std::string ca_file;    // clients: CA bundle that the server's certificate must chain to
  bool server_enabled() const { return !cert_file.empty(); }
};

// Bounds on what a client reaches before it authenticates, on every RPC listener of the
// process (services/rpc/rpc_server.h's ConnectionLimits says what each does).
struct ConnectionsConfig {
  uint64_t auth_deadline_ms = 5000;  // accept to authenticated, TLS included
  uint64_t pre_auth_message_bytes = uint64_t{64} << 10;
  uint32_t max = 0;              // per RPC listener; 0: 1/2 of RLIMIT_NOFILE
  uint32_t data_stream_max = 0;  // per data stream; 0: 1/4 of RLIMIT_NOFILE
  uint32_t max_unauthenticated = 1024;
  uint32_t max_unauthenticated_per_address = 64;
  uint32_t auth_failure_burst = 10;        // failed tokens per address at once,
  uint32_t auth_failures_per_minute = 60;  // then at most this many a minute
};

// An inference engine whose KV event stream the coordinator follows (its ZMQ publisher:
// vLLM's --kv-events-config, SGLang's, TensorRT-LLM's). In flags and environment variables
// one engine is "name=...;events=tcp://...;replay=...;format=vllm;tokens_per_block=16;
// tenant=...;model=..." (a YAML list item may be that string or a map of those keys).
struct EngineConfig {
  std::string name;
  std::string events;              // tcp://host:port of its PUB socket
  std::string replay = {};         // tcp://host:port of its ROUTER replay socket; empty: none
  std::string format = "vllm";     // vllm, sglang or trtllm
  uint32_t tokens_per_block = 16;  // the kvtier block size its blocks are keyed at
  std::string tenant = {};         // whose key space its blocks join (auth.token_file's name)
  std::string model = {};          // the model tag of its keys (what a gateway's "model" names)
  // "dns": `events`' host names a set of engines (a Kubernetes headless Service), one
  // engine "<name>-<address>" per address it resolves to, resolved again every
  // CoordinatorConfig::engine_discovery_interval_ms. Empty: the endpoints as given.
  std::string discovery = {};
  friend bool operator==(const EngineConfig&, const EngineConfig&) = default;
};

struct CoordinatorConfig {
  std::vector<std::string> listen = {"127.0.0.1:7400"};  // host:port; port 0 picks one
  std::string unix_socket;                               // path; empty for none
  uint64_t max_message_bytes = 64ull << 20;
  uint64_t lease_ttl_ms = 10000;  // a node silent this long leaves the index
  uint64_t busy_poll_us = 0;      // poll without sleeping while calls arrive (rpc_server.h); 0: off
  // Bounds the index's memory (~64 bytes a block); the default is the most an index can
  // hold (coordinator::kMaxIndexBlocks, checked where the coordinator is built).
  static constexpr uint64_t kDefaultMaxIndexBlocks = (1ull << 27) - 1;
  uint64_t max_index_blocks = kDefaultMaxIndexBlocks;
  // How long a stored event whose parent no node holds waits for some node's event to
  // bring it (coordinator/cluster/waiting_children.h); 0: left out at once.
  uint64_t orphan_wait_ms = 2000;
  // Routing's cost per block to prefill against one active block (index/routing.h): higher
  // keeps prompts with the engine or worker holding their prefix, lower balances load.
  double overlap_weight = 1.0;
  uint64_t routed_load_half_life_ms = 5000;  // engines' load from the coordinator's own routes
  std::vector<EngineConfig> engines = {};  // engines' KV event streams to follow
  uint64_t engine_discovery_interval_ms = 10000;  // how often discovery: dns resolves again
  std::vector<std::string> http_listen =
      {};  // the routing API for gateways (host:port); empty: off
  // The block size of SDK clients' keys, for the routing API's lookups by tokens (`kvtier up`
  // uses its worker's); 0: only engines' keys are looked up.
  uint32_t sdk_tokens_per_block = 16;
};

// The worker node's pool. Without a GPU the pool lives in host memory (`pool_bytes`).
struct WorkerConfig {
  uint32_t num_layers = 4;  // the model's KV layout (defaults: a small test model)
  uint32_t num_kv_heads = 2;
  uint32_t head_dim = 64;
  uint32_t tokens_per_block = 16;
  std::string dtype = "fp16";
  // Each layer's attention window in tokens, as TensorRT-LLM's max_attention_window: the
  // list repeats over the layers (layer i has [i % size]), and the layers of one window
  // share a pool (WorkerLayouts). Empty: full attention. A list of several windows gives
  // every layer its window in tokens (a full-attention layer: the longest sequence).
  std::vector<uint32_t> max_attention_window = {};
  uint32_t sink_tokens = 0;  // windowed pools: the first tokens of a sequence, never released
  uint64_t pool_bytes = 256ull << 20;  // the host budget when there is no GPU
  double free_memory_fraction = 0.9;   // of free GPU memory, or of pool_bytes, for KV blocks
  uint64_t max_tokens = 0;             // cap the pool at this many tokens; 0: no cap
  uint32_t secondary_offload_min_priority =
      kDefaultPriority;  // evicted blocks at least this go to the host tier
  uint32_t tier_threads =
      0;  // helpers that hash and copy a batch to and from the tiers; 0: the default (tier_link.h)
  uint64_t offload_staging_bytes =
      64ull << 20;  // evicted blocks stored behind the allocation (offload_queue.h); 0: off
  // `kvtier worker` only:
  std::string listen =
      "127.0.0.1:7401";              // its Worker and BlockStore's host:port (port 0 picks one)
  std::string advertise = {};        // where peers reach it; empty: the bound listen address
  bool data_stream = true;           // its BlockStore's bulk bytes beside the RPC, TLS with tls
  uint32_t data_port = 0;            // the data stream's port on the listen host; 0 picks one
  uint32_t data_stream_threads = 0;  // its event loops; 0: hardware threads / 2, 2 to 8
  uint32_t data_stream_tier_threads =
      0;  // its disk work's threads (with a disk tier); 0: as many as loops
  bool data_stream_lend_pages =
      true;  // node sessions' gets sent zero copy (DataStreamServerOptions)
  uint64_t fetch_stream_min_block_bytes = 64ull << 10;  // peer fetches of smaller blocks go inline
  std::vector<std::string> write_through_stores =
      {};  // store node ids: committed blocks are written to one too
  uint64_t write_through_queue_bytes = 256ull
                                       << 20;  // blocks waiting for it beyond this are skipped
};

// The node's host and disk tiers (under data_dir/blocks).
struct StoreConfig {
  uint64_t host_cache_bytes = 256ull << 20;
  uint64_t disk_bytes = 1ull << 30;
  std::string disk_sync = "wal";  // none | wal | fsync: see storage/disk_tier.h
  // Which blocks a full disk tier takes: all | min-count | tinylfu (storage/admission.h).
  std::string disk_admission = "all";
  uint32_t disk_admission_min_count = 2;  // min-count: requests a block needs, 1 to 16
  uint32_t host_free_percent =
      5;  // of the host tier, kept free ahead of puts by moving blocks down (disk tier only)
  // `kvtier store` only:
  std::string listen = "127.0.0.1:7402";  // its BlockStore's host:port (port 0 picks one)
  std::string advertise = {};             // where peers reach it; empty: the bound listen address
  bool data_stream = true;  // bulk bytes beside the RPC (services/store/stream), TLS with tls
  uint32_t data_port = 0;   // the data stream's port on the listen host; 0 picks one
  uint32_t data_stream_threads = 0;  // its event loops; 0: hardware threads / 2, 2 to 8
  uint32_t data_stream_tier_threads =
      0;  // its disk work's threads (with a disk tier); 0: as many as loops
  bool data_stream_lend_pages =
      true;  // node sessions' gets sent zero copy (DataStreamServerOptions)
};

// How a node of its own (`kvtier worker`, `kvtier store`) reaches the coordinator.
struct NodeConfig {
  std::string name = {};  // the node's id prefix; empty: the host name (the pod's)
  std::string coordinator = "127.0.0.1:7400";  // the coordinator it registers with
  std::string coordinator_token_file = {};  // its token there (first line); empty: none (auth off)
};

struct KvtierConfig {
  std::string data_dir = "./kvtier-data";
  LogConfig log;
  MetricsConfig metrics;
  AuthConfig auth;
  TlsConfig tls;
  ConnectionsConfig connections;
  CoordinatorConfig coordinator;
  WorkerConfig worker;
  StoreConfig store;
  NodeConfig node;
};

// One declared setting, for help texts and documentation.
struct ConfigFieldInfo {
  std::string path;
  std::string env_var;
  std::string flag;
  std::string allowed;  // "[0, 65535]", "one of: trace, debug, ..."
  std::string help;
  std::string default_value;
};
[[nodiscard]] std::vector<ConfigFieldInfo> ListConfigFields();

struct ConfigSources {
  std::string yaml_path;                           // empty: no file
  std::map<std::string, std::string> environment;  // all of it; non-KVTIER_ entries are ignored
  std::vector<std::pair<std::string, std::string>> flags;  // (setting path, text) in order given
};

// Defaults, then each source in order; then cross-field checks.
[[nodiscard]] Result<KvtierConfig> LoadConfig(const ConfigSources& sources);

// Parses YAML text over `config` (exposed for tests and for configs not in files).
[[nodiscard]] Status ApplyYaml(std::string_view yaml_text, std::string_view source_name,
                               KvtierConfig& config);

// Sets one setting from text, as an environment variable or flag would.
[[nodiscard]] Status ApplySetting(std::string_view path, std::string_view text,
                                  KvtierConfig& config);

// Checks that hold across settings (TLS certificate and key come together, ...).
[[nodiscard]] Status ValidateConfig(const KvtierConfig& config);

// One pool of the worker: its layout and the model's layers it holds, in order.
struct WorkerPoolLayout {
  KvLayout layout;
  std::vector<uint32_t> layers;
};

// The pools worker.* describes: one per distinct window of worker.max_attention_window
// (windows ascending), each holding the layers of that window, windowed ones with
// worker.sink_tokens. kInvalidArgument (naming the field) for a layout the library
// refuses, or a list that mixes 0 (full attention) with windows.
[[nodiscard]] Result<std::vector<WorkerPoolLayout>> WorkerLayouts(const WorkerConfig& worker);

// The process environment as a map, for ConfigSources::environment.
[[nodiscard]] std::map<std::string, std::string> ProcessEnvironment();

}  // namespace kvtier
