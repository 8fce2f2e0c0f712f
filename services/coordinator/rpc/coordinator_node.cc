#include "services/coordinator/rpc/coordinator_node.h"

#include "services/coordinator/rpc/coordinator_service.h"
#include "services/rpc/rpc_server.h"
#include "services/rpc/session_service.h"

namespace kvtier::coordinator {

class CoordinatorNode::Impl {
 public:
  explicit Impl(CoordinatorNodeOptions options) : options_(std::move(options)) {}

  Status Start() {
    if (options_.registry == nullptr) return InvalidArgumentError("CoordinatorNode needs a metrics registry");
    KVTIER_ASSIGN_OR_RETURN(metrics_, rpc::RpcMetrics::Create(*options_.registry));
    CoordinatorOptions coordinator;
    coordinator.index.clock = options_.clock;
    coordinator.index.expected_blocks = options_.expected_blocks;
    static_assert(CoordinatorConfig::kDefaultMaxIndexBlocks == kMaxIndexBlocks, "the config's default is the index's limit");
    coordinator.index.max_blocks = options_.rpc.max_index_blocks;
    coordinator.orphan_wait = std::chrono::milliseconds(options_.rpc.orphan_wait_ms);
    coordinator.membership.clock = options_.clock;
    coordinator.membership.lease_ttl = options_.lease_ttl;
    KVTIER_ASSIGN_OR_RETURN(state_.coordinator, Coordinator::Create(coordinator));
    KVTIER_ASSIGN_OR_RETURN(state_.metrics, CoordinatorMetrics::Create(*options_.registry));
    session_.identity = {options_.node_id, options_.roles};
    session_.tokens = &options_.tokens;
    session_.clock = options_.clock;
    session_.metrics = metrics_.get();
    session_.coordinator = [this](const auth::Tenant& tenant) {
      return MakeCoordinatorService(state_, {SaltScope(tenant.salt), tenant.node, KeySalt(tenant.salt)});
    };
    state_.on_lookup = options_.on_lookup;
    session_.worker = options_.worker;
    session_.store = options_.store;

    rpc::RpcServerOptions server;
    server.listen = options_.rpc.listen;
    if (!options_.rpc.unix_socket.empty()) server.listen.push_back("unix:" + options_.rpc.unix_socket);
    server.max_message_bytes = options_.rpc.max_message_bytes;
    server.busy_poll = std::chrono::microseconds(options_.rpc.busy_poll_us);
    server.thread_name = "kvt-coord";
    server.tls_cert_file = options_.tls.cert_file;
    server.tls_key_file = options_.tls.key_file;
    server.metrics = metrics_.get();
    server.limits = rpc::ConnectionLimitsFrom(options_.connections);
    server.tick = [this] {
      if (options_.on_tick) options_.on_tick(state_);
      state_.coordinator->Tick();
      state_.metrics->Update(state_.coordinator->Stats());
    };
    const Nanos interval = options_.tick_interval.count() > 0 ? options_.tick_interval : options_.lease_ttl / 4;
    server.tick_interval = std::chrono::duration_cast<std::chrono::milliseconds>(interval);
    KVTIER_ASSIGN_OR_RETURN(server_, rpc::RpcServer::Create(std::move(server),
                                                            rpc::SessionBootstraps(session_)));
    return Status::Ok();
  }

  CoordinatorNodeOptions options_;
  std::unique_ptr<rpc::RpcMetrics> metrics_;
  CoordinatorState state_;  // used only on the server's event-loop thread
  rpc::SessionContext session_;
  std::unique_ptr<rpc::RpcServer> server_;
};

Result<std::unique_ptr<CoordinatorNode>> CoordinatorNode::Create(CoordinatorNodeOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  KVTIER_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<CoordinatorNode>(new CoordinatorNode(std::move(impl)));
}

CoordinatorNode::CoordinatorNode(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CoordinatorNode::~CoordinatorNode() { Shutdown(); }
const std::vector<std::string>& CoordinatorNode::endpoints() const { return impl_->server_->endpoints(); }
Status CoordinatorNode::Readiness() const { return impl_->server_->Readiness(); }
bool CoordinatorNode::tls() const { return impl_->server_->tls(); }
void CoordinatorNode::Shutdown() { impl_->server_->Shutdown(); }

}  // namespace kvtier::coordinator
