#include "services/coordinator/rpc/coordinator_node.h"

#include "services/coordinator/engines/engine_discovery.h"
#include "services/coordinator/engines/engine_nodes.h"
#include "services/coordinator/rpc/coordinator_service.h"
#include "services/coordinator/rpc/http_api.h"
#include "services/rpc/http_listener.h"
#include "services/rpc/rpc_server.h"
#include "services/rpc/session_service.h"

namespace kvtier::coordinator {

class CoordinatorNode::Impl {
 public:
  explicit Impl(CoordinatorNodeOptions options) : options_(std::move(options)) {}

  Status Start() {
    if (options_.registry == nullptr)
      return InvalidArgumentError("CoordinatorNode needs a metrics registry");
    KVTIER_ASSIGN_OR_RETURN(metrics_, rpc::RpcMetrics::Create(*options_.registry));
    CoordinatorOptions coordinator;
    coordinator.index.clock = options_.clock;
    coordinator.index.expected_blocks = options_.expected_blocks;
    static_assert(CoordinatorConfig::kDefaultMaxIndexBlocks == kMaxIndexBlocks,
                  "the config's default is the index's limit");
    coordinator.index.max_blocks = options_.rpc.max_index_blocks;
    coordinator.orphan_wait = std::chrono::milliseconds(options_.rpc.orphan_wait_ms);
    coordinator.overlap_weight = options_.rpc.overlap_weight;
    coordinator.routed_load_half_life =
        std::chrono::milliseconds(options_.rpc.routed_load_half_life_ms);
    coordinator.membership.clock = options_.clock;
    coordinator.membership.lease_ttl = options_.lease_ttl;
    KVTIER_ASSIGN_OR_RETURN(state_.coordinator, Coordinator::Create(coordinator));
    KVTIER_ASSIGN_OR_RETURN(state_.metrics, CoordinatorMetrics::Create(*options_.registry));
    engine_nodes_ = std::make_unique<EngineNodes>(*state_.coordinator, state_.scopes);
    session_.identity = {options_.node_id, options_.roles};
    session_.tokens = &options_.tokens;
    session_.clock = options_.clock;
    session_.metrics = metrics_.get();
    session_.coordinator = [this](const auth::Tenant& tenant) {
      return MakeCoordinatorService(state_,
                                    {SaltScope(tenant.salt), tenant.node, KeySalt(tenant.salt)});
    };
    state_.on_lookup = options_.on_lookup;
    session_.worker = options_.worker;
    session_.store = options_.store;

    rpc::RpcServerOptions server;
    server.listen = options_.rpc.listen;
    if (!options_.rpc.unix_socket.empty())
      server.listen.push_back("unix:" + options_.rpc.unix_socket);
    server.max_message_bytes = options_.rpc.max_message_bytes;
    server.busy_poll = std::chrono::microseconds(options_.rpc.busy_poll_us);
    server.thread_name = "kvt-coord";
    server.tls_cert_file = options_.tls.cert_file;
    server.tls_key_file = options_.tls.key_file;
    server.metrics = metrics_.get();
    server.limits = rpc::ConnectionLimitsFrom(options_.connections);
    if (!options_.rpc.http_listen.empty())
      server.on_loop = [this](kj::AsyncIoContext& io) { return StartHttp(io); };
    server.tick = [this] {
      if (options_.on_tick) options_.on_tick(state_);
      engine_nodes_->Tick();
      state_.coordinator->Tick();
      state_.metrics->Update(state_.coordinator->Stats());
    };
    const Nanos interval =
        options_.tick_interval.count() > 0 ? options_.tick_interval : options_.lease_ttl / 4;
    server.tick_interval = std::chrono::duration_cast<std::chrono::milliseconds>(interval);
    KVTIER_ASSIGN_OR_RETURN(
        server_, rpc::RpcServer::Create(std::move(server), rpc::SessionBootstraps(session_)));
    if (!options_.engines.empty()) return ReconfigureEngines(options_.engines);
    return Status::Ok();
  }

  // The configured engines, discovering ones among them, go through the discovery,
  // which applies their expansion (ApplyEngines).
  Status ReconfigureEngines(std::vector<EngineSource> engines) {
    KVTIER_RETURN_IF_ERROR(ValidateEngineSources(engines));
    if (discovery_) return discovery_->SetSources(std::move(engines));
    EngineDiscoveryOptions discovery{
        .sources = std::move(engines),
        .apply = [this](std::vector<EngineSource> e) { return ApplyEngines(std::move(e)); },
        .interval = std::chrono::milliseconds(options_.rpc.engine_discovery_interval_ms),
        .registry = options_.registry};
    KVTIER_ASSIGN_OR_RETURN(discovery_, EngineDiscovery::Create(std::move(discovery)));
    return Status::Ok();
  }

  // On the discovery's thread or the controlling one, one at a time (engine_discovery.h).
  Status ApplyEngines(std::vector<EngineSource> engines) {
    KVTIER_RETURN_IF_ERROR(ValidateEngineSources(engines));
    if (!feed_) {
      KVTIER_RETURN_IF_ERROR(StartFeed(engines));
    } else {
      KVTIER_RETURN_IF_ERROR(feed_->Reconfigure(engines));
    }
    server_->RunOnLoop([&] { engines_ = std::move(engines); });
    return Status::Ok();
  }

  void Shutdown() {
    discovery_.reset();  // it reconfigures the feed
    feed_.reset();       // its sink runs on the server's loop
    server_->Shutdown();
  }

  Result<kj::Promise<void>> StartHttp(kj::AsyncIoContext& io) {
    rpc::HttpListenerOptions http{.listen = options_.rpc.http_listen,
                                  .tls_cert_file = options_.tls.cert_file,
                                  .tls_key_file = options_.tls.key_file};
    const rpc::ConnectionLimits limits = rpc::ConnectionLimitsFrom(options_.connections);
    HttpApiOptions api{.state = &state_,
                       .tokens = &options_.tokens,
                       .engines = &engines_,
                       .sdk_tokens_per_block = options_.sdk_tokens_per_block,
                       .throttle = {.burst = limits.auth_failure_burst,
                                    .per_second = limits.auth_failures_per_second}};
    KVTIER_ASSIGN_OR_RETURN(
        kj::Own<rpc::HttpListener> listener,
        rpc::HttpListener::Create(io, std::move(http), [&](kj::HttpHeaderTable::Builder& headers) {
          return MakeHttpApi(api, headers);
        }));
    http_endpoints_ = listener->endpoints();
    auto running = listener->Run();
    return running.attach(kj::mv(listener));
  }

  Status StartFeed(const std::vector<EngineSource>& engines) {
    EngineFeedOptions feed{
        .engines = engines, .registry = options_.registry, .clock = options_.clock};
    feed.sink = [this](std::vector<EngineUpdate>& updates) {
      std::vector<std::string> resync;
      server_->RunOnLoop([&] { resync = engine_nodes_->Apply(updates); });
      return resync;
    };
    KVTIER_ASSIGN_OR_RETURN(feed_, EngineFeed::Create(std::move(feed)));
    return Status::Ok();
  }

  CoordinatorNodeOptions options_;
  std::unique_ptr<rpc::RpcMetrics> metrics_;
  CoordinatorState state_;                     // used only on the server's event-loop thread
  std::unique_ptr<EngineNodes> engine_nodes_;  // the server's thread's
  std::vector<EngineSource> engines_;          // the server's thread's (the routing API reads it)
  rpc::SessionContext session_;
  std::unique_ptr<rpc::RpcServer> server_;
  std::vector<std::string> http_endpoints_;  // set on the server's thread before Create() returns
  std::unique_ptr<EngineFeed> feed_;         // ApplyEngines', one at a time (the discovery's order)
  std::unique_ptr<EngineDiscovery> discovery_;  // last: it goes first, as it drives feed_
};

Result<std::vector<EngineSource>> ResolveEngineSources(const std::vector<EngineConfig>& engines,
                                                       const auth::TokenStore& tokens) {
  std::vector<EngineSource> sources;
  for (const EngineConfig& e : engines) {
    KVTIER_ASSIGN_OR_RETURN(const EngineFormat format, ParseEngineFormat(e.format));
    // No tenant: the unsalted key space (auth off, `kvtier up`'s local user).
    Result<std::string> salt = e.tenant.empty() ? std::string() : tokens.TenantSalt(e.tenant);
    if (!salt.ok()) return salt.status().WithContext("engine \"" + e.name + "\"");
    sources.push_back(EngineSource{.name = e.name,
                                   .events = e.events,
                                   .replay = e.replay,
                                   .format = format,
                                   .space = {.tenant = KeySalt(*salt),
                                             .model = e.model,
                                             .tokens_per_block = e.tokens_per_block},
                                   .salt_scope = SaltScope(*salt),
                                   .tenant = e.tenant,
                                   .discover = e.discovery == "dns"});
  }
  return sources;
}

Result<std::unique_ptr<CoordinatorNode>> CoordinatorNode::Create(CoordinatorNodeOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  KVTIER_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<CoordinatorNode>(new CoordinatorNode(std::move(impl)));
}

CoordinatorNode::CoordinatorNode(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CoordinatorNode::~CoordinatorNode() { Shutdown(); }
const std::vector<std::string>& CoordinatorNode::endpoints() const {
  return impl_->server_->endpoints();
}
const std::vector<std::string>& CoordinatorNode::http_endpoints() const {
  return impl_->http_endpoints_;
}
Status CoordinatorNode::ReconfigureEngines(std::vector<EngineSource> engines) {
  return impl_->ReconfigureEngines(std::move(engines));
}
Status CoordinatorNode::Readiness() const { return impl_->server_->Readiness(); }
bool CoordinatorNode::tls() const { return impl_->server_->tls(); }
void CoordinatorNode::Shutdown() { impl_->Shutdown(); }

}  // namespace kvtier::coordinator
