#include "services/rpc/session_service.h"

#include <chrono>

#include "common/version.h"
#include "services/rpc/credential_guard.h"
#include "services/rpc/schema/kvtier.capnp.h"
#include "services/rpc/status_mapping.h"
#include "services/rpc/timed_server.h"

namespace kvtier::rpc {
namespace {

void FillServerInfo(const ServerIdentity& identity, schema::ServerInfo::Builder info) {
  info.setVersion(kVersion);
  info.setSchemaVersion(kSchemaVersion);
  info.setNodeId(identity.node_id);
  auto roles = info.initRoles(static_cast<unsigned>(identity.roles.size()));
  for (unsigned i = 0; i < identity.roles.size(); ++i) roles.set(i, identity.roles[i]);
}

// Records one call's outcome and latency when it goes out of scope.
class CallRecorder {
 public:
  CallRecorder(RpcMetrics* metrics, std::string_view method)
      : metrics_(metrics), method_(method), start_(std::chrono::steady_clock::now()) {}
  ~CallRecorder() {
    if (metrics_ == nullptr) return;
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
    metrics_->RecordCall(method_, status_, elapsed.count());
  }
  // Records `status` and throws it to the caller.
  [[noreturn]] void Fail(Status status) {
    status_ = std::move(status);
    ThrowStatus(status_);
  }

 private:
  RpcMetrics* metrics_;
  std::string_view method_;
  std::chrono::steady_clock::time_point start_;
  Status status_;
};

class SessionServer final : public schema::Session::Server {
 public:
  SessionServer(const SessionContext& context, std::shared_ptr<CredentialGuard> guard)
      : context_(context), guard_(std::move(guard)), tenant_(guard_->tenant()) {}

 protected:
  kj::Promise<void> ping(PingContext call) override {
    CallRecorder recorder(context_.metrics, "ping");
    Guard(recorder);
    const capnp::Data::Reader payload = call.getParams().getPayload();
    if (payload.size() > kMaxPingPayloadBytes) {
      recorder.Fail(InvalidArgumentError("ping payload is " + std::to_string(payload.size()) +
                                         " bytes; the limit is " +
                                         std::to_string(kMaxPingPayloadBytes)));
    }
    auto results = call.getResults();
    results.setPayload(payload);
    results.setServerTimeNs(static_cast<uint64_t>(context_.clock->Now().count()));
    return kj::READY_NOW;
  }

  kj::Promise<void> version(VersionContext call) override {
    CallRecorder recorder(context_.metrics, "version");
    Guard(recorder);
    FillServerInfo(context_.identity, call.getResults().initServer());
    return kj::READY_NOW;
  }

  kj::Promise<void> coordinator(CoordinatorContext call) override {
    CallRecorder recorder(context_.metrics, "coordinator");
    Guard(recorder);
    if (!context_.coordinator) {
      recorder.Fail(UnavailableError("node " + context_.identity.node_id +
                                     " does not run the coordinator role"));
    }
    call.getResults().setCoordinator(Timed<schema::Coordinator>(context_.coordinator(tenant_)));
    return kj::READY_NOW;
  }

  kj::Promise<void> worker(WorkerContext call) override {
    CallRecorder recorder(context_.metrics, "worker");
    Guard(recorder);
    if (!context_.worker) {
      recorder.Fail(
          UnavailableError("node " + context_.identity.node_id + " does not run the worker role"));
    }
    call.getResults().setWorker(Timed<schema::Worker>(context_.worker(tenant_)));
    return kj::READY_NOW;
  }

  kj::Promise<void> store(StoreContext call) override {
    CallRecorder recorder(context_.metrics, "store");
    Guard(recorder);
    if (!context_.store) {
      recorder.Fail(UnavailableError("node " + context_.identity.node_id +
                                     " serves no blocks (no store role)"));
    }
    call.getResults().setStore(Timed<schema::BlockStore>(context_.store(tenant_)));
    return kj::READY_NOW;
  }

  kj::Promise<void> actFor(ActForContext call) override {
    CallRecorder recorder(context_.metrics, "actFor");
    Guard(recorder);
    const uint64_t generation = context_.tokens->generation();  // before the check, as above
    Result<auth::Tenant> sibling =
        context_.tokens->ActFor(tenant_, call.getParams().getTenant().cStr());
    if (!sibling.ok()) recorder.Fail(sibling.status());
    auto results = call.getResults();
    results.setTenant(sibling->name);
    results.setSession(kj::heap<SessionServer>(
        context_,
        std::make_shared<CredentialGuard>(*context_.tokens, *std::move(sibling), generation)));
    return kj::READY_NOW;
  }

 private:
  void Guard(CallRecorder& recorder) {
    if (Status granted = guard_->Check(); !granted.ok()) recorder.Fail(std::move(granted));
  }
  // `server`, guarded by the session's credential, each call timed.
  template <typename Interface>
  typename Interface::Client Timed(kj::Own<capnp::Capability::Server> server) {
    return TimeCalls(Guarded(kj::mv(server), guard_), capnp::Schema::from<Interface>(),
                     context_.metrics)
        .template castAs<Interface>();
  }

  const SessionContext& context_;
  const std::shared_ptr<CredentialGuard> guard_;
  const auth::Tenant& tenant_;  // guard_'s
};

class BootstrapServer final : public schema::Bootstrap::Server {
 public:
  BootstrapServer(const SessionContext& context, std::shared_ptr<ConnectionGate> gate)
      : context_(context), gate_(std::move(gate)) {}

 protected:
  kj::Promise<void> authenticate(AuthenticateContext call) override {
    CallRecorder recorder(context_.metrics, "authenticate");
    if (failures_ >= kMaxAuthFailures) {
      recorder.Fail(UnauthenticatedError(
          "too many failed authentication attempts on this connection; reconnect"));
    }
    if (Status admitted = gate_->BeforeAuthenticate(); !admitted.ok())
      recorder.Fail(std::move(admitted));
    const uint64_t generation =
        context_.tokens->generation();  // before the check: a reload after it is seen
    Result<auth::Tenant> tenant = context_.tokens->Authenticate(
        call.getParams().getToken().cStr(), call.getParams().getActFor().cStr());
    if (!tenant.ok()) {
      ++failures_;
      if (context_.metrics != nullptr) context_.metrics->auth_failures().Inc();
      gate_->AuthenticationFailed();
      recorder.Fail(tenant.status());
    }
    gate_->Authenticated();
    auto results = call.getResults();
    results.setTenant(tenant->name);
    FillServerInfo(context_.identity, results.initServer());
    results.setSession(kj::heap<SessionServer>(
        context_,
        std::make_shared<CredentialGuard>(*context_.tokens, *std::move(tenant), generation)));
    return kj::READY_NOW;
  }

 private:
  const SessionContext& context_;
  const std::shared_ptr<ConnectionGate> gate_;
  int failures_ = 0;
};

}  // namespace

capnp::Capability::Client MakeBootstrap(const SessionContext& context,
                                        std::shared_ptr<ConnectionGate> gate) {
  return schema::Bootstrap::Client(kj::heap<BootstrapServer>(context, std::move(gate)));
}

BootstrapFactory SessionBootstraps(const SessionContext& context) {
  return [&context](std::shared_ptr<ConnectionGate> gate) {
    return MakeBootstrap(context, std::move(gate));
  };
}

}  // namespace kvtier::rpc
