# kvtier RPC schema: the bootstrap capability and the tenant session.
# Evolution rules: see common.capnp.
#
# Every kvtier listener (TCP or Unix socket, plain or TLS) serves Bootstrap as its
# bootstrap capability. Bootstrap offers nothing but authenticate(): all other
# capabilities hang off the Session it returns, which is scoped to one tenant (and so to
# one cache salt). A connection that never authenticates can do nothing else.
#
# Errors: a failed call raises a Cap'n Proto exception whose description starts with
# "kvtier[CODE]" where CODE is a canonical status code name (INVALID_ARGUMENT, ...);
# services/rpc/status_mapping.h turns it back into a Status on the client.
@0xae271292a5bfa421;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kvtier::rpc::schema");

using Common = import "common.capnp";
using Coordinator = import "coordinator.capnp";
using Worker = import "worker.capnp";
using Store = import "store.capnp";

interface Bootstrap {
  authenticate @0 (token :Text, actFor :Text) -> (session :Session, tenant :Text, server :Common.ServerInfo);
  # Exchanges a token (from the token file or Kubernetes secret) for a session. `actFor`:
  # the tenant an engine credential acts for (it must name one of the engine's tenants);
  # empty or the token's own name for tenant and node tokens. A wrong token:
  # UNAUTHENTICATED, and the connection stays unauthenticated; a tenant the token may not
  # act for: PERMISSION_DENIED. With auth switched off (local use only) any token gives
  # the "default" tenant with an empty salt.
}

interface Session {
  # Everything a tenant can do. Holds the tenant's salt: block keys computed or matched
  # through this session never meet another tenant's.

  ping @0 (payload :Data) -> (payload :Data, serverTimeNs :UInt64);
  # Echoes `payload` (at most 64 KiB) and the server's monotonic clock: liveness and RTT.

  version @1 () -> (server :Common.ServerInfo);
  # The server's release, schema version, roles and node id.

  coordinator @2 () -> (coordinator :Coordinator.Coordinator);
  # The cluster index: lookup, routing, registration and events. UNAVAILABLE where this
  # process does not run the coordinator role.

  worker @3 () -> (worker :Worker.Worker);
  # The local worker's pools. UNAVAILABLE where this process runs no worker.

  store @4 () -> (store :Store.BlockStore);
  # Block reads and writes (storage nodes, and workers serving their pools to peers).
  # UNAVAILABLE where this process serves no blocks.

  actFor @5 (tenant :Text) -> (session :Session, tenant :Text);
  # A sibling session, on this connection, acting for another tenant of the same engine
  # credential: what authenticate(the engine's token, `tenant`) opens, without sending the
  # token again. An engine serves many tenants over one connection and picks each
  # request's tenant by the session it calls (pipelined: no round trip of its own).
  # PERMISSION_DENIED unless this session is an engine's and `tenant` one of the engine's
  # tenants; a reload that revokes either ends the sibling as it ends this session.
}
