// ClientConnection: what a Client and the tenant views made from it (Client::ForTenant)
// share: the node's connection, the answers held on it, and the coordinator's link.
// Internal to services/client/rpc.
//
// Each client reaches the node through a ClientIdentity of its own: the connection's
// session (the root client) or a sibling session acting for another tenant (a view), and
// the Worker capability obtained from it, which is the client's identity at the node (its
// sequences live there). Queued calls hold the identity by shared_ptr, so an attempt
// retried after its client is gone finds it closed and never runs under another session.
//
// Thread safety: Link() from any thread; everything named "the loop's" is made, used and
// dropped on the connection's loop thread only.
// Ownership: a connection lives while its root client or any view does; its coordinator
// link dies before its RPC client.
#pragma once

#include "services/rpc/gcc_kj_workaround.h"  // first: before any KJ header

#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "services/client/client.h"
#include "services/rpc/deferred_finish.h"
#include "services/rpc/rpc_client_impl.h"

namespace kvtier::client {

using Deferred = std::shared_ptr<rpc::DeferredFinish>;

// A client's identity at the node; made, used and dropped on the connection's loop only.
struct ClientIdentity {
  kj::Own<rpc::schema::Session::Client> session;  // a view's sibling session; null: the root's
  kj::Own<rpc::schema::Worker::Client> worker;    // obtained once, pipelined
  bool closed = false;                            // set as the client goes

  // The session calls go through: the view's own, else the connection's.
  rpc::schema::Session::Client& SessionOf(rpc::schema::Session::Client& root) {
    return session ? *session : root;
  }
  rpc::schema::Worker::Client& Worker(rpc::schema::Session::Client& root) {
    if (!worker) worker = kj::heap(SessionOf(root).workerRequest().send().getWorker());
    return *worker;
  }
};

// A sibling of `session` acting for `tenant` (Session.actFor), pipelined.
inline rpc::schema::Session::Client ActingFor(rpc::schema::Session::Client& session,
                                              const std::string& tenant) {
  auto request = session.actForRequest();
  request.setTenant(tenant);
  return request.send().getSession();
}

// The coordinator's connection (its own, or the node's) and a Coordinator capability on
// it for each tenant a client acts for, made and dropped on that connection's loop.
// `deferred` holds the answers of lookups and routes until the link's next call is sent,
// so that their Finish messages ride behind it (services/rpc/deferred_finish.h); it is
// shared with the answers' continuations, which may run after a replaced link is gone,
// and used and emptied on the link's loop only. On the node's connection it is the node
// calls' one: one per connection.
struct CoordinatorLink {
  CoordinatorLink(rpc::RpcClient* shared, Deferred shared_deferred)
      : rpc(shared), deferred(std::move(shared_deferred)) {}
  explicit CoordinatorLink(std::unique_ptr<rpc::RpcClient> own)
      : rpc(own.get()), owned(std::move(own)) {}
  ~CoordinatorLink() {
    rpc->impl().RunOnLoop([this] {
      deferred->CallSent();
      capabilities.clear();
    });
  }
  // The loop's: the Coordinator capability of `tenant` (empty: the connection's own
  // session's), obtained at its first call, pipelined: no round trip of its own.
  rpc::schema::Coordinator::Client& For(const std::string& tenant,
                                        rpc::schema::Session::Client& session) {
    kj::Own<rpc::schema::Coordinator::Client>& capability = capabilities[tenant];
    if (!capability) {
      capability = kj::heap(
          tenant.empty() ? session.coordinatorRequest().send().getCoordinator()
                         : ActingFor(session, tenant).coordinatorRequest().send().getCoordinator());
    }
    return *capability;
  }

  rpc::RpcClient* rpc;
  std::unique_ptr<rpc::RpcClient> owned;  // null: the coordinator is at the node's address
  std::map<std::string, kj::Own<rpc::schema::Coordinator::Client>> capabilities;  // the loop's
  Deferred deferred = std::make_shared<rpc::DeferredFinish>();
};

struct ClientConnection {
  // `coordinator_rpc`: a second connection for the coordinator's calls (made with
  // `coordinator_options`, and again with them when it is lost), or null.
  ClientConnection(std::unique_ptr<rpc::RpcClient> node_rpc,
                   std::unique_ptr<rpc::RpcClient> coordinator_rpc,
                   rpc::RpcClientOptions coordinator_link_options, ClientOptions client_options)
      : rpc(std::move(node_rpc)),
        coordinator_options(std::move(coordinator_link_options)),
        options(std::move(client_options)) {
    MutexLock lock(link_mu);
    link = coordinator_rpc ? std::make_shared<CoordinatorLink>(std::move(coordinator_rpc))
                           : std::make_shared<CoordinatorLink>(rpc.get(), deferred);
  }

  // The coordinator's link; a connection of its own that was lost (the coordinator
  // restarted or moved) is made again first, blocking this caller (and other coordinator
  // calls) for at most the connect timeout. It holds no state a new one lacks. When the
  // connect fails the lost link is kept, and the call answers kUnavailable.
  std::shared_ptr<CoordinatorLink> Link() {
    MutexLock lock(link_mu);
    if (link->owned != nullptr && !link->rpc->connected()) {
      Result<std::unique_ptr<rpc::RpcClient>> again = rpc::RpcClient::Connect(coordinator_options);
      if (again.ok()) link = std::make_shared<CoordinatorLink>(std::move(again).value());
    }
    return link;
  }

  const std::unique_ptr<rpc::RpcClient> rpc;
  const rpc::RpcClientOptions coordinator_options;
  const ClientOptions options;
  // The node connection's held answers; used on rpc's loop thread only (shared with the
  // calls' continuations, which run there).
  const Deferred deferred = std::make_shared<rpc::DeferredFinish>();
  Mutex link_mu;  // a leaf; held while reconnecting
  std::shared_ptr<CoordinatorLink> link KVTIER_GUARDED_BY(link_mu);  // dies before rpc
};

}  // namespace kvtier::client
