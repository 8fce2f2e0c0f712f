#include "services/store/rpc/store_node.h"

#include <atomic>
#include <random>

#include "services/coordinator/rpc/node_agent.h"
#include "services/rpc/rpc_server.h"
#include "services/rpc/session_service.h"
#include "services/store/rpc/node_data_stream.h"
#include "services/store/rpc/store_node_events.h"
#include "services/store/rpc/store_service.h"
#include "services/store/store_tiers.h"
#include "storage/store_metrics.h"

namespace kvtier::store {

class StoreNode::Impl {
 public:
  explicit Impl(StoreNodeOptions options) : options_(std::move(options)) {}
  ~Impl() { (void)Drain(); }

  Status Start() {
    if (options_.registry == nullptr || options_.node_id.empty()) {
      return InvalidArgumentError("StoreNodeOptions: registry and node_id are required");
    }
    KVTIER_ASSIGN_OR_RETURN(storage::TieredStoreOptions tiers,
                            TieredStoreOptionsFrom(options_.config));
    // Under the store's locks: the agent's queue is a leaf lock.
    tiers.on_event = [this](const storage::StoreEvent& event) {
      if (coordinator::NodeAgent* agent = agent_.load()) agent->Enqueue({ToNodeEvent(event)});
    };
    KVTIER_ASSIGN_OR_RETURN(admission_, AddDiskAdmission(options_.config, 0, tiers));
    KVTIER_ASSIGN_OR_RETURN(store_, storage::TieredStore::Create(std::move(tiers)));
    KVTIER_ASSIGN_OR_RETURN(metrics_, storage::StoreMetrics::Create(*options_.registry));
    metrics_->Update(store_->Stats());

    session_.identity = {options_.node_id, {"store"}};
    session_.tokens = &options_.tokens;
    session_.clock = &SystemClock::Instance();
    KVTIER_ASSIGN_OR_RETURN(
        stream_, StartNodeDataStream(NodeDataStreamOptionsFrom(
                     options_.config.store, options_.config, store_.get(), options_.registry)));
    session_.store = [this](const auth::Tenant& tenant) {
      BlockStoreServiceOptions service{.store = store_.get(), .stream = stream_.get()};
      if (admission_ != nullptr)
        service.on_request = [this](std::span<const BlockKey> keys) { admission_->Record(keys); };
      return MakeBlockStoreService(service, tenant);
    };
    rpc::RpcServerOptions server;
    server.listen = {options_.config.store.listen};
    server.thread_name = "kvt-store";
    server.max_message_bytes = options_.config.coordinator.max_message_bytes;
    server.tls_cert_file = options_.config.tls.cert_file;
    server.tls_key_file = options_.config.tls.key_file;
    server.limits = rpc::ConnectionLimitsFrom(options_.config.connections);
    KVTIER_ASSIGN_OR_RETURN(
        server_, rpc::RpcServer::Create(std::move(server), rpc::SessionBootstraps(session_)));
    StartAgent();
    return Status::Ok();
  }

  const std::vector<std::string>& endpoints() const { return server_->endpoints(); }
  Status Readiness() const {
    KVTIER_RETURN_IF_ERROR(server_->Readiness());
    return stream_ ? stream_->Readiness() : Status::Ok();
  }
  bool registered() const { return agent_owner_ != nullptr && agent_owner_->registered(); }

  Status Drain() {
    if (drained_.exchange(true)) return Status::Ok();
    Status status = agent_owner_ != nullptr ? agent_owner_->Stop() : Status::Ok();
    if (server_) server_->Shutdown();
    if (stream_) stream_->Shutdown();
    if (store_) {
      if (Status flushed = store_->Flush(); !flushed.ok() && status.ok())
        status = flushed.WithContext("flush");
    }
    return status;
  }

 private:
  void StartAgent() {
    coordinator::NodeAgentOptions agent;
    agent.link.connection.address = options_.config.node.coordinator;
    agent.link.connection.token = options_.coordinator_token;
    agent.link.connection.tls_ca_file = options_.config.tls.ca_file;
    agent.link.node_id = options_.node_id;
    agent.link.role = kvtier::NodeRole::kStore;
    const std::string& advertise = options_.config.store.advertise;
    agent.link.rpc_address = advertise.empty() ? endpoints().front() : advertise;
    agent.link.incarnation = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
    agent.link.pools = ToNodePools(*store_);
    agent.tick = options_.tick;
    agent.holdings = [this]() -> Result<std::vector<coordinator::NodeBlock>> {
      return ToNodeBlocks(*store_);
    };
    agent.on_tick = [this] { metrics_->Update(store_->Stats()); };
    agent_owner_ = coordinator::NodeAgent::Start(std::move(agent));
    agent_ = agent_owner_.get();
  }

  StoreNodeOptions options_;
  // Counts this store's own requests (puts, gets and contains it serves); null: admit all.
  std::shared_ptr<storage::DiskAdmission> admission_;
  std::unique_ptr<storage::TieredStore> store_;
  std::unique_ptr<storage::StoreMetrics> metrics_;
  std::unique_ptr<DataStreamServer> stream_;  // before the server whose sessions use it
  rpc::SessionContext session_;
  std::unique_ptr<rpc::RpcServer> server_;
  std::unique_ptr<coordinator::NodeAgent> agent_owner_;
  std::atomic<coordinator::NodeAgent*> agent_{nullptr};  // read by the store's event hook
  std::atomic<bool> drained_{false};
};

Result<std::unique_ptr<StoreNode>> StoreNode::Create(StoreNodeOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  KVTIER_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<StoreNode>(new StoreNode(std::move(impl)));
}

StoreNode::StoreNode(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StoreNode::~StoreNode() = default;
const std::vector<std::string>& StoreNode::endpoints() const { return impl_->endpoints(); }
Status StoreNode::Readiness() const { return impl_->Readiness(); }
bool StoreNode::registered() const { return impl_->registered(); }
Status StoreNode::Drain() { return impl_->Drain(); }

}  // namespace kvtier::store
