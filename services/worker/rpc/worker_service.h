// The Worker capability: a thin `final` adapter from the RPC schema
// (services/rpc/schema/worker.capnp) to the plain Worker library (services/worker/worker.h).
//
// Each capability is one client of the worker, scoped to a tenant: its block keys chain
// from the tenant's salt root, and its sequence ids are its own. When the capability is
// released (the client let go of it, or its connection dropped), every reference the
// client held is released with it.
//
// Thread safety: every capability runs on the RPC server's event-loop thread. The worker
// runs there too, unless the context names a thread of its own (`worker_thread`): then
// every call on the worker is queued there in the order the calls came, the capability's
// thread waits on none (a lookup on the same loop is not held up by an allocation's
// offload), and a capability that goes waits there until the worker has dropped its
// client.
// Ownership: `context`, its worker and its thread outlive every capability made from it.
#pragma once

#include <capnp/capability.h>

#include "services/auth/token_store.h"
#include "services/worker/worker.h"

namespace kj {
class Executor;
}  // namespace kj

namespace kvtier::worker {

class PeerFetcher;

struct WorkerServiceContext {
  Worker* worker = nullptr;
  PeerFetcher* peers = nullptr;  // optional: onboarding from the nodes a request names
  // Optional: the loop the worker lives on when it is not the capabilities' (`kvtier up`:
  // services/rpc/loop_thread.h); null: the capabilities' own.
  const kj::Executor* worker_thread = nullptr;
  ClientId next_client = 1;
};

// The capability's server (the session counts and times its calls: services/rpc/timed_server.h).
[[nodiscard]] kj::Own<capnp::Capability::Server> MakeWorkerService(WorkerServiceContext& context,
                                                                   const auth::Tenant& tenant);

}  // namespace kvtier::worker
