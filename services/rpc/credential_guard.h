// CredentialGuard: keeps a session's calls to the credential it was opened with.
//
// A reload of the token file may revoke or change the token a session authenticated with
// (services/auth/token_store.h). Every call of the session and of each capability it hands
// out (Guarded) asks Check() first; Check asks the token store again once per reload
// (TokenStore::generation) and, once the store no longer grants the session, answers
// UNAUTHENTICATED for good: the client must authenticate again.
//
// Thread safety: one session's guard and guarded capabilities run on that session's RPC
// event-loop thread only.
// Ownership: `tokens` outlives the guard; the guard is shared by the session and the
// capabilities it handed out.
#pragma once

#include <cstdint>
#include <memory>

#include <capnp/capability.h>

#include "services/auth/token_store.h"

namespace kvtier::rpc {

class CredentialGuard {
 public:
  // `authenticated_at`: the store's generation read before the token was checked.
  CredentialGuard(const auth::TokenStore& tokens, auth::Tenant tenant, uint64_t authenticated_at)
      : tokens_(tokens), tenant_(std::move(tenant)), checked_(authenticated_at) {}

  [[nodiscard]] Status Check();
  const auth::Tenant& tenant() const { return tenant_; }

 private:
  const auth::TokenStore& tokens_;
  const auth::Tenant tenant_;
  uint64_t checked_;               // the store's generation when last granted
  Status revoked_ = Status::Ok();  // once not Ok, for good
};

// `server`, each of whose calls first passes guard->Check() (else throws its status).
[[nodiscard]] kj::Own<capnp::Capability::Server> Guarded(kj::Own<capnp::Capability::Server> server,
                                                         std::shared_ptr<CredentialGuard> guard);

}  // namespace kvtier::rpc
