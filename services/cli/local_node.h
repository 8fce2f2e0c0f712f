// LocalNode: the worker and store roles of `kvtier up`, in the coordinator's process.
//
// It owns the node's tiers (a TieredStore: host tier of store.host_cache_bytes, disk tier
// of store.disk_bytes under data_dir/blocks), one worker pool in host memory
// (worker.pool_bytes of the configured layout; GPU pools are not embedded yet) whose
// evictions go down into the tiers and whose Onboard reads from them, and the Worker
// capability that the coordinator's server hands to tenants (Session.worker), and the tiers
// as a BlockStore capability (Session.store).
//
// The worker runs on a thread of its own (`kvt-worker`, services/rpc/loop_thread.h), not
// on the coordinator's RPC loop: an allocation that hands hundreds of megabytes of victims
// to the host tier would otherwise hold up every lookup behind it. The capabilities stay
// on the RPC loop and queue their calls to that thread (worker_service.h). At every tick
// the worker's thread advances the worker's clock, updates its metrics and hands its
// events, with the store's queued since its last tick, to Pump.
//
// Pump() runs on the coordinator server's thread at every tick: it registers the two
// nodes ("<name>/worker", a worker; "<name>/store", a store) with the coordinator,
// renews their leases, and publishes their events in sequence. The store's holdings on
// disk are sent as its first snapshot, so blocks kept across a restart are found again.
// A registration reads the worker's pools and holdings on the worker's thread and waits
// for them.
//
// Thread safety: Embed before the coordinator node starts; MakeWorker, MakeStore and Pump
// on the coordinator server's thread only; worker and store events are queued under a
// mutex. Lock order: mu_ is a leaf.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <capnp/capability.h>

#include "common/config.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "services/auth/token_store.h"
#include "storage/admission.h"
#include "services/coordinator/rpc/coordinator_node.h"
#include "services/coordinator/rpc/coordinator_service.h"
#include "services/rpc/loop_thread.h"
#include "services/worker/rpc/worker_service.h"
#include "services/worker/tier_link.h"
#include "services/worker/worker_metrics.h"
#include "storage/store_metrics.h"

namespace kvtier::cli {

class LocalNode {
 public:
  // Registers the worker (kvtier_worker_*) and store (kvtier_store_*) metrics in `registry`,
  // which outlives the node; Pump keeps them current. `gpu`: the CUDA device whose memory
  // holds the worker's pool (shared by CUDA IPC), or -1 for host shared memory.
  [[nodiscard]] static Result<std::unique_ptr<LocalNode>> Create(const KvtierConfig& config,
                                                                 std::string name,
                                                                 MetricsRegistry& registry,
                                                                 int gpu = -1);
  ~LocalNode();

  // Adds the worker and store roles to a coordinator node about to be created: the
  // Session's Worker and BlockStore capabilities and the tick that runs Pump, every
  // `tick` (events reach the index within two). The first call starts the worker's
  // thread, ticking every `tick`; a later one (a restarted coordinator) reuses it.
  // kInvalidArgument: a tick that is not positive. REQUIRES: the node does not outlive
  // this object.
  [[nodiscard]] Status Embed(coordinator::CoordinatorNodeOptions& options, Nanos tick);

  kj::Own<capnp::Capability::Server> MakeWorker(const auth::Tenant& tenant);
  kj::Own<capnp::Capability::Server> MakeStore(
      const auth::Tenant& tenant);  // REQUIRES: the node has tiers
  void Pump(coordinator::CoordinatorState& state);
  // One line for the banner: layout, pool blocks, tier sizes.
  std::string Summary() const;
  // The tiers' counters (replay reports the disk's writes); none without tiers.
  std::optional<storage::TieredStoreStats> StoreStats() const;

 private:
  struct Registration {
    std::string node;
    kvtier::NodeRole role;
    uint64_t lease_id = 0;
    uint64_t next_sequence = 1;
    bool registered = false;
  };

  // What a registration tells the coordinator of the worker.
  struct WorkerView {
    std::vector<coordinator::PoolInfo> pools;
    std::vector<std::pair<uint32_t, worker::PoolHolding>> holdings;
  };

  LocalNode() = default;
  // On the worker's thread.
  void WorkerTick();
  WorkerView ViewWorker() const;
  Status Register(coordinator::CoordinatorState& state, Registration& node);
  void Publish(coordinator::CoordinatorState& state, Registration& node,
               std::vector<coordinator::KvEvent> events);

  std::string name_;
  uint64_t incarnation_ = 0;
  coordinator::ConnectionId connection_ =
      coordinator::kNoConnection;  // taken at the first Register
  std::string summary_;
  std::unique_ptr<storage::TieredStore> store_;
  std::unique_ptr<worker::TierLink> link_;
  std::unique_ptr<worker::Worker> worker_;
  worker::WorkerServiceContext context_;
  // The worker's thread, whose tick uses every member: stopped first (~LocalNode).
  std::unique_ptr<rpc::LoopThread> worker_loop_;
  std::atomic<uint64_t> active_blocks_{0};  // the pools' blocks in use at the worker's last tick
  std::unique_ptr<worker::WorkerMetrics> worker_metrics_;
  std::unique_ptr<storage::StoreMetrics> store_metrics_;
  Registration worker_node_, store_node_;
  Mutex mu_;
  // The events of one worker tick: the worker's since the last, then the store's queued
  // meanwhile. Published in that order, group by group: a store event may name a parent
  // that only the worker's events of the same tick or an earlier one bring in.
  struct EventGroup {
    std::vector<worker::WorkerEvent> worker;
    std::vector<storage::StoreEvent> store;
  };
  std::vector<storage::StoreEvent> store_events_
      KVTIER_GUARDED_BY(mu_);                             // since the last worker tick
  std::vector<EventGroup> ready_ KVTIER_GUARDED_BY(mu_);  // for the next Pump
  // Counts the coordinator's lookups for the disk tier's admission (null: admit all).
  std::shared_ptr<storage::DiskAdmission> admission_;
};

}  // namespace kvtier::cli
