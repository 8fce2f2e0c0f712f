// kvtier::client::Client: what an inference process uses to reuse KV blocks.
//
// One Client is one authenticated connection to a kvtier node (`kvtier up`, or a
// `kvtier worker` node with a second connection to the coordinator). Through it a process:
//   1. computes the block keys of a prompt (BlockKeys; the chain of common/block_key.h),
//   2. asks the coordinator what is cached (Lookup) and which worker to run on (Route),
//   3. builds a sequence's block table in the node's pool (Allocate): the cached prefix is
//      reused in place, the rest are blank blocks it computes into (the pool is mapped
//      with AttachPool: CUDA IPC or shared memory; bytes never cross the socket), and
//      grows it as tokens come (Extend; a static sequence reserves its capacity at once),
//   4. fills blocks the node's host and disk tiers hold, and with the lookup's locations
//      (SourcesOf) the blocks other nodes hold, fetched by the node (Onboard),
//   5. publishes its computed blocks with a retention policy (Commit), and drops the
//      sequence when done (Free; committed blocks stay cached until evicted).
// Sequence ids are the caller's; a sequence belongs to this client, and everything it
// holds is released when the client is destroyed or its connection closes.
//
// Every call has a synchronous form and an asynchronous one (`...Async`, a std::future).
// Failures are Status codes (common/status.h): the server's own code, kUnavailable when
// the connection is gone, kDeadlineExceeded after `timeout`. A lost connection to the
// node is final (the node dropped the client's sequences with it, and a restarted node's
// pool must be mapped again: make a new Client); a lost connection of the coordinator's
// own (`coordinator_address`) is made again by the next coordinator call, which waits
// for it (at most `timeout`): the coordinator keeps nothing of a client's. Calls
// that are safe to repeat (Lookup, Route, LookupLocal, AttachPool, Commit, the stats)
// are retried with backoff when the code advises it (RetryAdviceFor: kUnavailable,
// kResourceExhausted, kDeadlineExceeded); Allocate, Onboard and Extend are retried only on
// kResourceExhausted (the node refused: nothing happened), never after a timeout, whose
// outcome is unknown.
//
// Thread safety: every method may be called from any thread, concurrently.
// Ownership: destroying the client closes the connection; futures still outstanding
// then report kCancelled.
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/block_key.h"
#include "common/block_vocabulary.h"
#include "common/kv_layout.h"
#include "common/status.h"

namespace kvtier::client {

struct ClientOptions {
  std::string address = {};  // the node: "host:port" or "unix:/path"
  // The coordinator, where it is not at `address` (a `kvtier worker` node has none):
  // Lookup, Route and the coordinator's stats go there over a connection of their own.
  std::string coordinator_address = {};
  std::string token = {};  // tenant or engine token; any value when the server has auth off
  // The tenant an engine token acts for (services/auth/token_store.h): its salt keys the
  // client's calls, and only an engine may map pool memory (AttachPool). Empty: the
  // token's own tenant. The engine's other tenants are reached through ForTenant views.
  std::string act_for = {};
  std::string tls_ca_file = {};             // set: TLS, the server verified against this CA bundle
  std::string tls_server_name = {};         // default: the host of `address`
  std::chrono::milliseconds timeout{5000};  // per attempt
  int max_attempts = 3;                     // for calls that may be retried (above)
  std::chrono::milliseconds retry_backoff{20};  // before the second attempt; doubles
};

// The SDK speaks kvtier's shared vocabulary (common/block_vocabulary.h) under its own namespace.
using kvtier::Tier;

struct Location {
  std::string node_id;
  Tier tier = Tier::kGpu;
  uint32_t pool_id = 0;
  friend bool operator==(const Location&, const Location&) = default;
};

struct NodeScore {
  std::string node_id;
  uint32_t prefix_blocks = 0;  // longest consecutive prefix the node can serve
  double score = 0;  // weighted by tier, plus the share of a partially matching next block
  uint32_t partial_tokens = 0;  // tokens of the block after the prefix the node can reuse
};

struct LookupResult {
  uint32_t matched_blocks = 0;                   // longest cached prefix, in blocks
  std::vector<std::vector<Location>> locations;  // per matched block
  // Lookup with tail tokens: the cached block after the prefix sharing the most leading
  // tokens with the tail (partial reuse), how many it shares and holds, and where it is.
  uint32_t partial_match_tokens = 0;
  uint32_t partial_block_tokens = 0;
  BlockKey partial_block_key = {};  // with auth off only; zero where the tenant has a salt
  std::vector<Location> partial_block_locations = {};
  std::vector<NodeScore> scores;
};

struct RouteDecision {
  std::string node_id;
  std::string rpc_address;
  uint32_t prefix_blocks = 0;
  double score = 0;
  uint32_t partial_tokens = 0;  // of the tail tokens routed with, those the worker can reuse
};

// How a process maps a pool: one of the two mappings is set.
struct PoolMapping {
  uint32_t pool_id = 0;
  KvLayout layout;
  uint32_t num_blocks = 0;
  uint64_t block_stride_bytes = 0;
  std::string shared_memory_name;        // host pool: shm_open name
  std::vector<uint8_t> cuda_ipc_handle;  // device pool: cudaIpcMemHandle_t bytes
  int device = -1;                       // device pool: its CUDA device
};

struct AllocateRequest {
  uint64_t sequence = 0;
  uint32_t pool_id = 0;
  // The pools the sequence spans (a model with layers of several attention windows has
  // a pool per window): distinct, of one block size; empty: `pool_id` alone. The sequence
  // gets a table in each (Allocation::tables), and Extend, Commit, Onboard and Free cover
  // them all. The prefix reused is the longest that every one of them serves (a windowed
  // pool by its sinks and its last window), and so is the partial reuse after it.
  std::vector<uint32_t> pool_ids = {};
  std::vector<BlockKey> keys = {};    // the prompt's full blocks
  uint32_t num_tokens = 0;            // the prompt's length
  std::vector<uint32_t> tokens = {};  // optional: the prompt, for partial reuse of one more block
  uint64_t format_tag = 0;            // what else changes KV values (LoRA, model)
  // The sequence's mode. 0: dynamic, Extend grows its table block by block. Above 0:
  // static (preallocated, for CUDA graphs): the table holds the blocks of this many
  // tokens (at least num_tokens) from Allocate on and never changes, so its block ids
  // and their addresses stay put; Extend past it is kOutOfRange.
  uint32_t reserve_tokens = 0;
};

// A table entry for a block outside a windowed pool's window: skipped by a reuse (between
// the sinks and the last window) or let go as the sequence grew.
inline constexpr uint32_t kNoBlock = UINT32_MAX;

// A sequence's block table in one of its pools.
struct PoolTable {
  uint32_t pool_id = 0;
  std::vector<uint32_t> block_ids = {};  // in token order; kNoBlock outside the window
};

struct Allocation {
  std::vector<uint32_t> block_ids;  // the block table in the first pool, in token order
  uint32_t reused_blocks = 0;       // leading blocks whose KV is already there
  uint32_t partial_reuse_tokens = 0;
  std::vector<PoolTable> tables = {};  // one per pool the sequence spans, as allocated
};

struct OnboardResult {
  uint32_t onboarded_blocks = 0;  // from_host + from_disk + from_remote
  uint32_t cached_blocks = 0;     // leading full blocks now holding KV
  uint32_t from_host = 0;
  uint32_t from_disk = 0;
  uint32_t from_remote = 0;  // fetched from other nodes (the sources named)
};

struct WorkerStats {
  std::vector<KvLayout> pool_layouts;  // by pool id
  uint32_t total_blocks = 0;           // over every pool
  uint32_t used_blocks = 0;
  uint32_t cached_blocks = 0;
  uint64_t reuse_hits = 0;
  uint64_t evictions = 0;
  uint64_t offloaded_blocks = 0;
  uint64_t onboarded_blocks = 0;
  // True where the session is a node's: the counts of use cover every tenant. A tenant
  // sees the pools' sizes and layouts only, and zero counts.
  bool cluster_counts = false;
};

struct CoordinatorStats {
  uint32_t nodes = 0;
  uint64_t index_blocks = 0;
  uint64_t index_bytes = 0;
  uint64_t lookups = 0;
  uint64_t sequence_gaps = 0;   // nodes' event streams found with a gap (each asked for a snapshot)
  uint64_t resyncs = 0;         // snapshots applied
  uint64_t lease_expiries = 0;  // nodes dropped when their lease ran out
  bool cluster_counts = false;  // as WorkerStats': a tenant sees the node count only
};

using kvtier::RetentionConfig;

// A host pool mapped into this process: the node's blocks in place, block i at
// bytes().subspan(i * block_stride_bytes, layout.bytes_per_block()). Writes are seen by
// the node (offload, commit) without a copy; unmapped when destroyed. Move-only.
class MappedPool {
 public:
  // kFailedPrecondition for a device pool (its cuda_ipc_handle is opened with
  // cudaIpcOpenMemHandle, gpu/shared_device_memory.h); kNotFound when the node's memory
  // is gone.
  [[nodiscard]] static Result<MappedPool> Map(const PoolMapping& mapping);
  MappedPool(MappedPool&&) noexcept;
  MappedPool& operator=(MappedPool&&) noexcept;
  ~MappedPool();

  std::span<uint8_t> bytes() const;
  // The bytes of one block. REQUIRES: block < num_blocks.
  std::span<uint8_t> block(uint32_t block) const;

 private:
  struct Memory;
  MappedPool(std::unique_ptr<Memory> memory, uint64_t stride, uint64_t block_bytes);
  std::unique_ptr<Memory> memory_;
  uint64_t stride_ = 0;
  uint64_t block_bytes_ = 0;
};

class Client {
 public:
  // kUnauthenticated for a bad token, kUnavailable when nothing answers, kInvalidArgument
  // for a bad address or CA file.
  [[nodiscard]] static Result<std::unique_ptr<Client>> Connect(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& tenant() const;

  // A client over this one's connection acting for `tenant`, another tenant of the same
  // engine credential: an engine serving many tenants picks each request's tenant by the
  // view it calls, over one connection (and one pool mapping). A view is a Client in every
  // respect: its calls are keyed by its tenant's salt, its sequences are its own (released
  // when it is destroyed), and a reload of the token file that revokes it ends its calls
  // alone. It may outlive this client. ForTenant waits for the node's grant (one round
  // trip); the view's calls cost no more than this client's. kPermissionDenied unless this client's
  // token is an engine's acting for `tenant` too; kUnavailable once the connection is gone.
  [[nodiscard]] Result<std::unique_ptr<Client>> ForTenant(const std::string& tenant);

  // The keys of every full block of `tokens` (a partial last block has none yet).
  // REQUIRES: tokens_per_block > 0.
  static std::vector<BlockKey> BlockKeys(std::span<const uint32_t> tokens,
                                         uint32_t tokens_per_block,
                                         const BlockExtraKeys& extra = {});

  // The coordinator (kUnavailable where the node runs none). `tail_tokens`: the prompt's
  // tokens after its full blocks, for a partial match of the block after the prefix
  // (nodes that commit with tokens make their blocks candidates).
  [[nodiscard]] Result<LookupResult> Lookup(std::span<const BlockKey> keys,
                                            std::span<const uint32_t> tail_tokens = {});
  [[nodiscard]] std::future<Result<LookupResult>> LookupAsync(
      std::span<const BlockKey> keys, std::span<const uint32_t> tail_tokens = {});
  // The worker to run a prompt on (the coordinator's lowest routing cost): `tail_tokens` as
  // for Lookup; `candidates`: the node ids it may go to (empty: any live worker).
  [[nodiscard]] Result<RouteDecision> Route(std::span<const BlockKey> keys,
                                            std::span<const uint32_t> tail_tokens = {},
                                            std::span<const std::string> candidates = {});
  [[nodiscard]] std::future<Result<RouteDecision>> RouteAsync(
      std::span<const BlockKey> keys, std::span<const uint32_t> tail_tokens = {},
      std::span<const std::string> candidates = {});
  [[nodiscard]] Result<CoordinatorStats> GetCoordinatorStats();

  // The node's worker (kUnavailable where the node runs none).
  [[nodiscard]] Result<PoolMapping> AttachPool(uint32_t pool_id, const KvLayout& layout);
  [[nodiscard]] Result<Allocation> Allocate(const AllocateRequest& request);
  [[nodiscard]] std::future<Result<Allocation>> AllocateAsync(const AllocateRequest& request);
  [[nodiscard]] Result<Allocation> Extend(uint64_t sequence, uint32_t num_tokens);
  // Fills the sequence's blocks after its reused prefix from the node's tiers, then from
  // `sources` (node ids, in preference order: SourcesOf a lookup), which the node reaches
  // itself; unreachable sources only mean fewer blocks.
  [[nodiscard]] Result<OnboardResult> Onboard(uint64_t sequence, std::span<const BlockKey> keys,
                                              const RetentionConfig& retention = {},
                                              std::span<const std::string> sources = {});
  [[nodiscard]] std::future<Result<OnboardResult>> OnboardAsync(
      uint64_t sequence, std::span<const BlockKey> keys, const RetentionConfig& retention = {},
      std::span<const std::string> sources = {});
  // The nodes a lookup placed the prompt's blocks on, for Onboard: those holding a block
  // in GPU memory first, then host, then disk, each in order of first appearance.
  static std::vector<std::string> SourcesOf(const LookupResult& lookup);
  // Returns how many blocks this call cached.
  [[nodiscard]] Result<uint32_t> Commit(uint64_t sequence, std::span<const BlockKey> keys,
                                        const RetentionConfig& retention = {},
                                        std::span<const uint32_t> tokens = {});
  [[nodiscard]] std::future<Result<uint32_t>> CommitAsync(uint64_t sequence,
                                                          std::span<const BlockKey> keys,
                                                          const RetentionConfig& retention = {},
                                                          std::span<const uint32_t> tokens = {});
  [[nodiscard]] Status Free(uint64_t sequence);
  [[nodiscard]] std::future<Status> FreeAsync(uint64_t sequence);
  // The longest prefix of `keys` cached in the node's pool, or that every pool of
  // `pool_ids` serves (what Allocate over those pools would reuse).
  [[nodiscard]] Result<uint32_t> LookupLocal(uint32_t pool_id, std::span<const BlockKey> keys);
  [[nodiscard]] Result<uint32_t> LookupLocal(std::span<const uint32_t> pool_ids,
                                             std::span<const BlockKey> keys);
  [[nodiscard]] Result<WorkerStats> GetWorkerStats();

  class Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::client
