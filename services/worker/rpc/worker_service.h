// The Worker capability: a thin `final` adapter from the RPC schema
// (services/rpc/schema/worker.capnp) to the plain Worker library (services/worker/worker.h).
//
// Each capability is one client of the worker, scoped to a tenant: its block keys chain
// from the tenant's salt root, and its sequence ids are its own. When the capability is
// released (the client let go of it, or its connection dropped), every reference the
// client held is released with it.
//
// Thread safety: every capability and the worker run on the RPC server's event-loop thread.
// Ownership: `context` and its worker outlive every capability made from it.
#pragma once

#include <capnp/capability.h>

#include "services/auth/token_store.h"
#include "services/worker/worker.h"

namespace kvtier::worker {

class PeerFetcher;

struct WorkerServiceContext {
  Worker* worker = nullptr;
  PeerFetcher* peers = nullptr;  // optional: onboarding from the nodes a request names
  ClientId next_client = 1;
};

[[nodiscard]] capnp::Capability::Client MakeWorkerService(WorkerServiceContext& context, const auth::Tenant& tenant);

}  // namespace kvtier::worker
