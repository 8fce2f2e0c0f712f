#include "services/cli/local_node.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <optional>
#include <random>

#include "common/mutex.h"
#include "services/cli/node_events.h"
#include "services/coordinator/cluster/event_chains.h"
#include "services/store/rpc/store_node_events.h"
#include "services/store/rpc/store_service.h"
#include "services/store/store_tiers.h"
#include "services/worker/worker_plan.h"

namespace kvtier::cli {
namespace {

uint64_t SaltScopeOf(const worker::WorkerEvent& event) { return event.salt_scope; }
uint64_t SaltScopeOf(const storage::StoreEvent& event) { return event.header.salt_scope; }

// A role's events as the coordinator takes them, each with its tenant's scope interned.
template <typename Event>
std::vector<coordinator::KvEvent> ToKvEvents(coordinator::CoordinatorState& state,
                                             const std::vector<Event>& events) {
  std::vector<coordinator::KvEvent> out;
  out.reserve(events.size());
  for (const Event& e : events)
    out.push_back(ToKvEvent(e, state.scopes.Intern(SaltScopeOf(e)).value_or(0)));
  return out;
}

std::string Mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

Result<std::unique_ptr<LocalNode>> LocalNode::Create(const KvtierConfig& config, std::string name,
                                                     MetricsRegistry& registry, int gpu) {
  std::unique_ptr<LocalNode> node(new LocalNode());
  node->name_ = std::move(name);
  node->incarnation_ = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  node->worker_node_ = {node->name_ + "/worker", kvtier::NodeRole::kWorker};
  node->store_node_ = {node->name_ + "/store", kvtier::NodeRole::kStore};

  KVTIER_ASSIGN_OR_RETURN(const worker::WorkerPlan plan,
                          worker::PlanWorkerPool(config.worker, gpu));
  // A block the worker offloads is at most the largest pool's: one host page each of that
  // size wastes nothing where there is one pool.
  const uint64_t block_bytes = plan.max_block_bytes();
  KVTIER_ASSIGN_OR_RETURN(storage::TieredStoreOptions store,
                          store::TieredStoreOptionsFrom(
                              config, static_cast<uint32_t>((block_bytes + 4095) / 4096 * 4096)));
  LocalNode* self = node.get();
  KVTIER_ASSIGN_OR_RETURN(node->admission_, store::AddDiskAdmission(config, block_bytes, store));
  store.on_event = [self](const storage::StoreEvent& event) {
    MutexLock lock(self->mu_);
    self->store_events_.push_back(event);
  };
  if (store.host || store.disk) {
    KVTIER_ASSIGN_OR_RETURN(node->store_, storage::TieredStore::Create(std::move(store)));
    node->link_ = std::make_unique<worker::TierLink>(
        worker::TierLinkOptions{.store = node->store_.get(),
                                .threads = worker::TierLinkThreads(config.worker.tier_threads),
                                .staging_bytes = config.worker.offload_staging_bytes});
  }
  worker::WorkerOptions worker;
  for (const worker::PlannedPool& p : plan.pools) worker.pools.push_back({p.layout, p.blocks});
  worker.secondary_offload_min_priority =
      static_cast<uint8_t>(config.worker.secondary_offload_min_priority);
  worker.offload = node->link_.get();
  worker.onboard = node->link_.get();
  worker.device = gpu;
  KVTIER_ASSIGN_OR_RETURN(node->worker_, worker::Worker::Create(worker));
  node->context_.worker = node->worker_.get();
  KVTIER_ASSIGN_OR_RETURN(node->worker_metrics_,
                          worker::WorkerMetrics::Create(registry, node->worker_->pool_count()));
  if (node->store_ != nullptr) {
    KVTIER_ASSIGN_OR_RETURN(node->store_metrics_, storage::StoreMetrics::Create(registry));
    node->store_metrics_->Update(node->store_->Stats());  // capacities show before the first tick
  }
  node->worker_metrics_->Update(node->worker_->Stats());
  node->summary_ = plan.Describe() + "; host tier " + Mib(config.store.host_cache_bytes) +
                   ", disk tier " + Mib(config.store.disk_bytes) + " (" + config.store.disk_sync +
                   ")";
  return node;
}

LocalNode::~LocalNode() {
  worker_loop_.reset();  // before anything its tick touches
  // The staged offloads into the store now, while the event hook's members still exist.
  if (link_) link_->Flush();
}

kj::Own<capnp::Capability::Server> LocalNode::MakeWorker(const auth::Tenant& tenant) {
  return worker::MakeWorkerService(context_, tenant);
}

Status LocalNode::Embed(coordinator::CoordinatorNodeOptions& options, Nanos tick) {
  if (tick.count() <= 0) return InvalidArgumentError("LocalNode::Embed: the tick must be positive");
  if (worker_loop_ == nullptr) {
    const auto interval = std::max(std::chrono::milliseconds(1),
                                   std::chrono::duration_cast<std::chrono::milliseconds>(tick));
    KVTIER_ASSIGN_OR_RETURN(worker_loop_, rpc::LoopThread::Create({.name = "kvt-worker",
                                                                   .tick = [this] { WorkerTick(); },
                                                                   .tick_interval = interval}));
    context_.worker_thread = &worker_loop_->executor();
  }
  options.roles = {"coordinator", "worker", "store"};
  options.worker = [this](const auth::Tenant& tenant) { return MakeWorker(tenant); };
  if (store_ != nullptr)
    options.store = [this](const auth::Tenant& tenant) { return MakeStore(tenant); };
  options.on_tick = [this](coordinator::CoordinatorState& state) { Pump(state); };
  options.tick_interval = tick;
  if (admission_ != nullptr)
    options.on_lookup = [this](std::span<const BlockKey> keys) { admission_->Record(keys); };
  return Status::Ok();
}

kj::Own<capnp::Capability::Server> LocalNode::MakeStore(const auth::Tenant& tenant) {
  return store::MakeBlockStoreService(*store_, tenant);
}

std::string LocalNode::Summary() const { return summary_; }

std::optional<storage::TieredStoreStats> LocalNode::StoreStats() const {
  if (store_ == nullptr) return std::nullopt;
  return store_->Stats();
}

void LocalNode::WorkerTick() {
  worker_->AdvanceTime();
  const worker::WorkerStats stats = worker_->Stats();
  worker_metrics_->Update(stats);
  if (link_) worker_metrics_->UpdateStaging(link_->StagingStats());
  uint64_t in_use = 0;
  for (const auto& pool : stats.pools) in_use += pool.in_use;
  active_blocks_ = in_use;
  EventGroup group{.worker = worker_->TakeEvents(), .store = {}};
  MutexLock lock(mu_);
  group.store.swap(store_events_);
  if (!group.worker.empty() || !group.store.empty()) ready_.push_back(std::move(group));
}

LocalNode::WorkerView LocalNode::ViewWorker() const {
  WorkerView view;
  const std::vector<worker::BlockPoolStats> stats = worker_->Stats().pools;
  for (uint32_t pool = 0; pool < stats.size(); ++pool) {
    const Result<KvLayout> layout = worker_->PoolLayout(pool);
    if (!layout.ok()) continue;
    view.pools.push_back({kvtier::Tier::kGpu, static_cast<uint16_t>(pool), stats[pool].total,
                          uint64_t{stats[pool].total} * layout->bytes_per_block(),
                          coordinator::WindowOf(*layout)});
  }
  view.holdings = worker_->Holdings();
  return view;
}

Status LocalNode::Register(coordinator::CoordinatorState& state, Registration& node) {
  std::vector<coordinator::PoolInfo> pools;
  WorkerView worker;
  if (&node == &worker_node_) {
    // Waits for the worker's thread (the call it runs, if any): registrations are rare.
    worker = worker_loop_->executor().executeSync([this] { return ViewWorker(); });
    pools = std::move(worker.pools);
  } else if (store_ != nullptr) {
    for (const coordinator::NodePool& tier : store::ToNodePools(*store_)) {
      pools.push_back({.tier = tier.tier, .capacity_bytes = tier.capacity_bytes});
    }
  }
  // In-process nodes hold their names like a connected node (an id never disconnected):
  // a `kvtier store` started elsewhere under the same name is refused, not let in to take
  // turns with this one at the lease.
  if (connection_ == coordinator::kNoConnection) connection_ = state.next_connection++;
  KVTIER_ASSIGN_OR_RETURN(const coordinator::RegisterResult result,
                          state.coordinator->Register({.node = node.node,
                                                       .role = node.role,
                                                       .incarnation = incarnation_,
                                                       .pools = std::move(pools),
                                                       .connection = connection_}));
  node.lease_id = result.lease_id;
  node.registered = true;
  if (!result.snapshot_required) return Status::Ok();
  // Everything the node holds now, as of its next event number: the worker's committed
  // blocks, or the store's blocks on every tier.
  coordinator::NodeSnapshot snapshot{node.node, incarnation_, node.next_sequence, {}};
  if (&node == &worker_node_) {
    for (const auto& [pool_id, holding] : worker.holdings) {
      Result<coordinator::ScopeId> scope = state.scopes.Intern(holding.salt_scope);
      if (scope.ok()) snapshot.blocks.push_back(ToSnapshotBlock(pool_id, holding, *scope));
    }
  }
  if (&node == &store_node_ && store_ != nullptr) {
    for (const auto& [tier, header] : store_->Holdings()) {
      Result<coordinator::ScopeId> scope = state.scopes.Intern(header.salt_scope);
      if (scope.ok()) snapshot.blocks.push_back(ToSnapshotBlock(tier, header, *scope));
    }
  }
  return state.coordinator->PublishSnapshot(snapshot);
}

void LocalNode::Publish(coordinator::CoordinatorState& state, Registration& node,
                        std::vector<coordinator::KvEvent> events) {
  if (events.empty()) return;
  events = coordinator::JoinChains(std::move(events));  // a chain committed together is one event
  const size_t count = events.size();
  coordinator::EventBatch batch{node.node, incarnation_, node.next_sequence, std::move(events)};
  Result<coordinator::EventAck> ack = state.coordinator->PublishEvents(batch);
  node.next_sequence += count;  // the events are spent either way; a gap makes a resync
  if (ack.ok() && state.metrics != nullptr) {  // as a node's publishEvents call counts them
    for (const coordinator::KvEvent& e : batch.events) state.metrics->RecordEvent(e.kind);
  }
  if (!ack.ok()) {
    spdlog::warn("{}: events not applied: {}", node.node, ack.status().ToString());
    node.registered = false;  // register again (a snapshot follows)
  } else if (ack->verdict == coordinator::BatchVerdict::kSnapshotRequired) {
    node.registered = false;
  }
}

void LocalNode::Pump(coordinator::CoordinatorState& state) {
  const uint64_t active_blocks = active_blocks_;
  for (Registration* node : {&worker_node_, &store_node_}) {
    if (node == &store_node_ && store_ == nullptr) continue;
    Status renewed = node->registered
                         ? state.coordinator->Heartbeat(node->node, node->lease_id, active_blocks)
                         : UnavailableError("not registered");
    if (!renewed.ok()) {
      if (Status s = Register(state, *node); !s.ok())
        spdlog::warn("{}: register: {}", node->node, s.ToString());
    }
  }
  if (store_metrics_ != nullptr) store_metrics_->Update(store_->Stats());
  std::vector<EventGroup> groups;
  {
    MutexLock lock(mu_);
    groups.swap(ready_);
  }
  for (const EventGroup& group : groups) {
    Publish(state, worker_node_, ToKvEvents(state, group.worker));
    Publish(state, store_node_, ToKvEvents(state, group.store));
  }
}

}  // namespace kvtier::cli
