#include "services/rpc/credential_guard.h"

#include "services/rpc/status_mapping.h"

namespace kvtier::rpc {
namespace {

class GuardedServer final : public capnp::Capability::Server {
 public:
  GuardedServer(kj::Own<capnp::Capability::Server> inner, std::shared_ptr<CredentialGuard> guard)
      : inner_(kj::mv(inner)), guard_(std::move(guard)) {}

  DispatchCallResult dispatchCall(
      uint64_t interface_id, uint16_t method_id,
      capnp::CallContext<capnp::AnyPointer, capnp::AnyPointer> context) override {
    if (Status granted = guard_->Check(); !granted.ok()) ThrowStatus(granted);
    return inner_->dispatchCall(interface_id, method_id, context);
  }

 private:
  kj::Own<capnp::Capability::Server> inner_;
  const std::shared_ptr<CredentialGuard> guard_;
};

}  // namespace

Status CredentialGuard::Check() {
  if (!revoked_.ok()) return revoked_;
  const uint64_t now = tokens_.generation();
  if (now == checked_) return Status::Ok();
  revoked_ = tokens_.StillGrants(tenant_);
  checked_ = now;
  return revoked_;
}

kj::Own<capnp::Capability::Server> Guarded(kj::Own<capnp::Capability::Server> server,
                                           std::shared_ptr<CredentialGuard> guard) {
  return kj::heap<GuardedServer>(kj::mv(server), std::move(guard));
}

}  // namespace kvtier::rpc
