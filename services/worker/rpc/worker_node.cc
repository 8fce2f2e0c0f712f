#include "services/worker/rpc/worker_node.h"

#include <atomic>
#include <optional>
#include <random>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "services/coordinator/rpc/node_agent.h"
#include "services/rpc/rpc_server.h"
#include "services/rpc/session_service.h"
#include "services/store/rpc/node_data_stream.h"
#include "services/store/rpc/store_node_events.h"
#include "services/store/rpc/store_service.h"
#include "services/store/store_tiers.h"
#include "services/worker/rpc/peers/node_connections.h"
#include "services/worker/rpc/peers/peer_fetcher.h"
#include "services/worker/rpc/peers/pool_block_source.h"
#include "services/worker/rpc/peers/remote_store_writer.h"
#include "services/worker/rpc/worker_service.h"
#include "services/worker/tier_link.h"
#include "services/worker/worker_metrics.h"
#include "services/worker/worker_plan.h"
#include "storage/store_metrics.h"

namespace kvtier::worker {
namespace {

constexpr auto kHoldingsWait = std::chrono::seconds(5);
constexpr auto kWriteThroughDrain = std::chrono::seconds(10);

uint64_t Millis(Nanos n) {
  return static_cast<uint64_t>(std::chrono::ceil<std::chrono::milliseconds>(n).count());
}

// A pool event as the worker's node stream carries it. An offloaded block leaves the
// pool; where it went is the store stream's business.
coordinator::NodeEvent ToNodeEvent(const WorkerEvent& e) {
  coordinator::NodeEvent out;
  out.key = e.key;
  out.tier = kvtier::Tier::kGpu;
  out.pool = e.pool_id;
  if (e.kind == WorkerEvent::Kind::kStored) {
    out.kind = coordinator::NodeEvent::Kind::kStored;
    out.first = e.first;
    out.parent = e.parent;
    out.priority = e.priority;
    out.retention_ms = Millis(e.retention);
    out.salt_scope = e.salt_scope;
    out.tokens = e.tokens;
  } else {
    out.kind = coordinator::NodeEvent::Kind::kRemoved;
  }
  return out;
}

}  // namespace

class WorkerNode::Impl {
 public:
  explicit Impl(WorkerNodeOptions options) : options_(std::move(options)) {}
  ~Impl() {
    (void)Drain();
    // Drain flushes the staging only for a node that started; the staged offloads go into
    // the store here too, while the store's event hook's members still exist.
    if (link_) link_->Flush();
  }

  Status Start() {
    if (options_.registry == nullptr || options_.name.empty()) {
      return InvalidArgumentError("WorkerNodeOptions: registry and name are required");
    }
    KVTIER_ASSIGN_OR_RETURN(plan_, PlanWorkerPool(options_.config.worker, options_.gpu));
    // An offloaded block is at most the largest pool's: one host page each of that size
    // wastes nothing where there is one pool.
    KVTIER_ASSIGN_OR_RETURN(
        storage::TieredStoreOptions tiers,
        store::TieredStoreOptionsFrom(
            options_.config,
            static_cast<uint32_t>((plan_->max_block_bytes() + 4095) / 4096 * 4096)));
    tiers.on_event = [this](const storage::StoreEvent& event) {
      if (coordinator::NodeAgent* agent = store_agent_.load())
        agent->Enqueue({store::ToNodeEvent(event)});
    };
    if (tiers.host || tiers.disk) {
      KVTIER_ASSIGN_OR_RETURN(store_, storage::TieredStore::Create(std::move(tiers)));
      link_ = std::make_unique<TierLink>(
          TierLinkOptions{.store = store_.get(),
                          .threads = TierLinkThreads(options_.config.worker.tier_threads),
                          .staging_bytes = options_.config.worker.offload_staging_bytes});
      KVTIER_ASSIGN_OR_RETURN(store_metrics_, storage::StoreMetrics::Create(*options_.registry));
    }
    WorkerOptions worker;
    for (const PlannedPool& p : plan_->pools) worker.pools.push_back({p.layout, p.blocks});
    worker.secondary_offload_min_priority =
        static_cast<uint8_t>(options_.config.worker.secondary_offload_min_priority);
    worker.offload = link_.get();
    worker.onboard = link_.get();
    worker.device = options_.gpu;
    KVTIER_ASSIGN_OR_RETURN(worker_, Worker::Create(worker));
    context_.worker = worker_.get();
    pool_source_ = std::make_unique<PoolBlockSource>(worker_.get());
    KVTIER_ASSIGN_OR_RETURN(
        nodes_, NodeConnections::Create(
                    {.coordinator_address = options_.config.node.coordinator,
                     .token = options_.coordinator_token,
                     .tls_ca_file = options_.config.tls.ca_file,
                     .max_message_bytes = options_.config.coordinator.max_message_bytes}));
    KVTIER_ASSIGN_OR_RETURN(
        peers_,
        PeerFetcher::Create(
            {.connections = nodes_.get(),
             .self_node_ids = {options_.name + "/worker", options_.name + "/store"},
             .stream_min_block_bytes = options_.config.worker.fetch_stream_min_block_bytes}));
    context_.peers = peers_.get();
    if (!options_.config.worker.write_through_stores.empty()) {
      KVTIER_ASSIGN_OR_RETURN(
          writer_, RemoteStoreWriter::Create(
                       {.connections = nodes_.get(),
                        .registry = options_.registry,
                        .store_nodes = options_.config.worker.write_through_stores,
                        .max_queued_bytes = options_.config.worker.write_through_queue_bytes,
                        .batch_bytes = WriteBatchBytes()}));
    }
    KVTIER_ASSIGN_OR_RETURN(worker_metrics_,
                            WorkerMetrics::Create(*options_.registry, worker_->pool_count()));
    worker_metrics_->Update(worker_->Stats());
    KVTIER_RETURN_IF_ERROR(StartServer());
    StartAgents();
    return Status::Ok();
  }

  const std::vector<std::string>& endpoints() const { return server_->endpoints(); }
  Status Readiness() const {
    KVTIER_RETURN_IF_ERROR(server_->Readiness());
    return stream_ ? stream_->Readiness() : Status::Ok();
  }
  bool registered() const {
    return worker_agent_owner_->registered() && (!store_ || store_agent_owner_->registered());
  }
  std::string Summary() const { return plan_->Describe(); }

  Status Drain() {
    if (drained_.exchange(true) || server_ == nullptr) return Status::Ok();
    Status status = worker_agent_owner_ ? worker_agent_owner_->Stop() : Status::Ok();
    if (store_agent_owner_) {
      if (Status s = store_agent_owner_->Stop(); !s.ok() && status.ok()) status = s;
    }
    {
      MutexLock lock(mu_);
      draining_ = true;  // a snapshot request now answers at once
    }
    holdings_ready_.NotifyAll();
    // The RPC loop goes first: a keyed get reading the pool on it from the stream's
    // threads is then answered at once (the pool's blocks missing), so the stream's
    // shutdown, which joins those threads, never waits on a loop that no longer runs.
    server_->Shutdown();
    if (stream_) stream_->Shutdown();
    if (writer_) {
      // What the last ticks committed still goes to the store, for a bounded while.
      if (Status flushed = writer_->Flush(kWriteThroughDrain); !flushed.ok() && status.ok())
        status = flushed;
    }
    if (link_) link_->Flush();  // the offloads still staged, into the store
    if (store_) {
      if (Status flushed = store_->Flush(); !flushed.ok() && status.ok())
        status = flushed.WithContext("flush");
    }
    return status;
  }

 private:
  Status StartServer() {
    session_.identity = {options_.name + "/worker", {"worker", "store"}};
    session_.tokens = &options_.tokens;
    session_.clock = &SystemClock::Instance();
    session_.worker = [this](const auth::Tenant& tenant) {
      return MakeWorkerService(context_, tenant);
    };
    if (store_) {
      KVTIER_ASSIGN_OR_RETURN(
          stream_, store::StartNodeDataStream(store::NodeDataStreamOptionsFrom(
                       options_.config.worker, options_.config, store_.get(), options_.registry)));
      // The tiers, and after them the pool's committed blocks, for peers onboarding them.
      session_.store = [this](const auth::Tenant& tenant) {
        return store::MakeBlockStoreService(
            {.store = store_.get(), .extra = pool_source_.get(), .stream = stream_.get()}, tenant);
      };
    }
    rpc::RpcServerOptions server;
    server.listen = {options_.config.worker.listen};
    server.thread_name = "kvt-worker";
    server.max_message_bytes = options_.config.coordinator.max_message_bytes;
    server.tls_cert_file = options_.config.tls.cert_file;
    server.tls_key_file = options_.config.tls.key_file;
    server.limits = rpc::ConnectionLimitsFrom(options_.config.connections);
    server.tick = [this] { LoopTick(); };
    server.tick_interval = options_.tick;
    KVTIER_ASSIGN_OR_RETURN(
        server_, rpc::RpcServer::Create(std::move(server), rpc::SessionBootstraps(session_)));
    return Status::Ok();
  }

  void StartAgents() {
    const std::string& advertise = options_.config.worker.advertise;
    coordinator::NodeAgentOptions agent;
    agent.link.connection.address = options_.config.node.coordinator;
    agent.link.connection.token = options_.coordinator_token;
    agent.link.connection.tls_ca_file = options_.config.tls.ca_file;
    agent.link.rpc_address = advertise.empty() ? endpoints().front() : advertise;
    agent.link.incarnation = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
    agent.tick = options_.tick;
    if (store_) {
      coordinator::NodeAgentOptions tiers = agent;
      tiers.link.node_id = options_.name + "/store";
      tiers.link.role = kvtier::NodeRole::kStore;
      tiers.link.pools = store::ToNodePools(*store_);
      tiers.holdings = [this]() -> Result<std::vector<coordinator::NodeBlock>> {
        return store::ToNodeBlocks(*store_);
      };
      store_agent_owner_ = coordinator::NodeAgent::Start(std::move(tiers));
      store_agent_ = store_agent_owner_.get();
    }
    agent.link.node_id = options_.name + "/worker";
    agent.link.role = kvtier::NodeRole::kWorker;
    for (size_t i = 0; i < plan_->pools.size(); ++i) {
      const PlannedPool& p = plan_->pools[i];
      agent.link.pools.push_back({.tier = kvtier::Tier::kGpu,
                                  .pool = static_cast<uint16_t>(i),
                                  .capacity_blocks = p.blocks,
                                  .capacity_bytes = uint64_t{p.blocks} * p.layout.bytes_per_block(),
                                  .layout = p.layout});
    }
    agent.holdings = [this] { return PoolHoldings(); };
    agent.active_blocks = [this] { return active_blocks_.load(); };
    worker_agent_owner_ = coordinator::NodeAgent::Start(std::move(agent));
    worker_agent_ = worker_agent_owner_.get();
  }

  // Blocks per write-through put: about 8 MiB, and within half a message.
  uint64_t WriteBatchBytes() const {
    const uint64_t block = plan_->max_block_bytes();
    const uint64_t cap = std::max<uint64_t>(
        block, std::min<uint64_t>(8ull << 20, options_.config.coordinator.max_message_bytes / 2));
    return std::min(cap, options_.config.worker.write_through_queue_bytes);
  }

  // On the server's loop: the worker's time, events, load and metrics; holdings when the
  // worker agent waits for them.
  void LoopTick() {
    worker_->AdvanceTime();
    std::vector<coordinator::NodeEvent> events;
    for (const WorkerEvent& e : worker_->TakeEvents()) {
      if (writer_ && e.kind == WorkerEvent::Kind::kStored && !e.onboarded) WriteThrough(e);
      events.push_back(ToNodeEvent(e));
    }
    if (writer_) writer_->Submit();
    // Events before the agent starts are not lost: it registers with a snapshot of the pool.
    coordinator::NodeAgent* agent = worker_agent_.load();
    if (agent != nullptr && !events.empty()) agent->Enqueue(std::move(events));
    const WorkerStats stats = worker_->Stats();
    uint64_t active = 0;
    for (const auto& pool : stats.pools) active += pool.in_use;
    active_blocks_ = active;
    worker_metrics_->Update(stats);
    if (link_) worker_metrics_->UpdateStaging(link_->StagingStats());
    if (store_metrics_) store_metrics_->Update(store_->Stats());
    MutexLock lock(mu_);
    if (holdings_wanted_) {
      std::vector<coordinator::NodeBlock> blocks;
      for (const auto& [pool, h] : worker_->Holdings()) {
        blocks.push_back({h.key, h.first, h.parent, kvtier::Tier::kGpu, pool, h.priority,
                          Millis(h.retention_left), h.salt_scope, h.tokens});
      }
      holdings_ = std::move(blocks);
      holdings_wanted_ = false;
      holdings_ready_.NotifyAll();
    }
  }

  // On the server's loop: a block this node's engine computed and committed, copied out of
  // the pool for the write-through store while the pool still holds it under that key.
  // Onboarded blocks are not written again: they were written through where they were
  // computed. Blocks below the offload priority are not worth keeping anywhere.
  void WriteThrough(const WorkerEvent& stored) {
    if (stored.priority < options_.config.worker.secondary_offload_min_priority) return;
    Result<std::optional<PoolHolding>> found =
        worker_->held().FindCommitted(stored.pool_id, stored.key);
    if (!found.ok() || !found->has_value()) return;  // evicted since: nothing to copy
    const PoolHolding& holding = **found;
    // Interned within the process's bound (engines choose format tags): past it the block
    // is not written through (counted as failed), as its own offload would not be stored.
    const Result<storage::FormatTag>& format = WriteFormat(stored.pool_id, holding.format_tag);
    if (!format.ok()) {
      writer_->CountRefused();
      return;
    }
    storage::BlockHeader header;
    header.key = holding.key;
    header.parent = holding.parent;
    header.first_in_chain = holding.first;
    header.format_tag = *format;
    header.salt_scope = holding.salt_scope;
    const KvLayout& layout = plan_->pools[stored.pool_id].layout;
    header.payload_bytes = layout.bytes_per_block();
    header.priority = holding.priority;
    header.retention_left_ms = Millis(holding.retention_left);
    (void)writer_->Write(header, [&](std::span<uint8_t> out) {
      return worker_->bytes().Read(stored.pool_id, holding.block, out);
    });  // not taken: counted by the writer; the node's own tiers still get it on eviction
  }

  // On the server's loop: the storage format tag of blocks written through for engines of
  // `format_tag`, interned once per run of blocks of one engine format (a node's engines
  // seldom use more than one): a block written through builds no string.
  const Result<storage::FormatTag>& WriteFormat(uint32_t pool, uint64_t format_tag) {
    if (!write_format_ || write_format_->pool != pool || write_format_->engine != format_tag) {
      write_format_.emplace(WriteFormatTag{
          pool, format_tag,
          storage::FormatTag::Intern(StorageFormatTag(plan_->pools[pool].layout, format_tag))});
    }
    return write_format_->tag;
  }

  // On the worker agent's thread: asks the loop for the pool's holdings and waits.
  Result<std::vector<coordinator::NodeBlock>> PoolHoldings() {
    MutexLock lock(mu_);
    holdings_.reset();
    holdings_wanted_ = true;
    if (!holdings_ready_.WaitFor(
            lock, kHoldingsWait,
            [this]() KVTIER_REQUIRES(mu_) { return holdings_.has_value() || draining_; }) ||
        !holdings_) {
      return UnavailableError("the worker's loop did not list its holdings");
    }
    return std::move(*holdings_);
  }

  WorkerNodeOptions options_;
  std::optional<WorkerPlan> plan_;
  std::unique_ptr<storage::TieredStore> store_;
  std::unique_ptr<TierLink> link_;
  std::unique_ptr<Worker> worker_;  // the server loop's
  WorkerServiceContext context_;
  std::unique_ptr<PoolBlockSource> pool_source_;     // the server loop's, as the worker
  std::unique_ptr<store::DataStreamServer> stream_;  // null: none (no tiers, TLS, turned off)
  std::unique_ptr<NodeConnections> nodes_;  // the peer fetches' and the writes through to a store
  std::unique_ptr<PeerFetcher> peers_;
  std::unique_ptr<RemoteStoreWriter> writer_;  // null: no write-through store
  // The loop's: WriteFormat's last (pool, engine format tag) and its storage tag, interned.
  struct WriteFormatTag {
    uint32_t pool;
    uint64_t engine;  // the engine's format tag
    Result<storage::FormatTag> tag;
  };
  std::optional<WriteFormatTag> write_format_;
  std::unique_ptr<WorkerMetrics> worker_metrics_;
  std::unique_ptr<storage::StoreMetrics> store_metrics_;
  rpc::SessionContext session_;
  std::unique_ptr<coordinator::NodeAgent> store_agent_owner_;
  std::atomic<coordinator::NodeAgent*> store_agent_{nullptr};  // read by the tiers' event hook
  std::unique_ptr<coordinator::NodeAgent> worker_agent_owner_;
  // Set once the agents start, after the server's loop, whose tick reads it, is running.
  std::atomic<coordinator::NodeAgent*> worker_agent_{nullptr};
  std::unique_ptr<rpc::RpcServer> server_;  // stopped before the worker and agents go
  std::atomic<uint64_t> active_blocks_{0};
  std::atomic<bool> drained_{false};
  Mutex mu_;  // a leaf
  CondVar holdings_ready_;
  bool holdings_wanted_ KVTIER_GUARDED_BY(mu_) = false;
  bool draining_ KVTIER_GUARDED_BY(mu_) = false;
  std::optional<std::vector<coordinator::NodeBlock>> holdings_ KVTIER_GUARDED_BY(mu_);
};

Result<std::unique_ptr<WorkerNode>> WorkerNode::Create(WorkerNodeOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  KVTIER_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<WorkerNode>(new WorkerNode(std::move(impl)));
}

WorkerNode::WorkerNode(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WorkerNode::~WorkerNode() = default;
const std::vector<std::string>& WorkerNode::endpoints() const { return impl_->endpoints(); }
Status WorkerNode::Readiness() const { return impl_->Readiness(); }
bool WorkerNode::registered() const { return impl_->registered(); }
std::string WorkerNode::Summary() const { return impl_->Summary(); }
Status WorkerNode::Drain() { return impl_->Drain(); }

}  // namespace kvtier::worker
