// StoreNode: the storage node as a running server (`kvtier store`).
//
// It opens the node's host and disk tiers (services/store/store_tiers.h; the disk tier's
// blocks survive restarts), serves them as the BlockStore capability to every tenant on
// its listeners (services/rpc/session_service.h), and keeps the coordinator told: a
// thread registers the node (retrying while the coordinator is unreachable), renews its
// lease, publishes the tiers' events in sequence, and answers a snapshot request (a new
// incarnation, a gap, a coordinator restart) with everything the tiers hold.
//
// Drain() is what SIGTERM does: leave the coordinator (the node's blocks leave lookups
// at once), stop serving, make the disk tier durable. The disk tier's admission
// (store.disk_admission, storage/admission.h) counts this store's own requests (puts,
// gets and contains of each key, inline or on the data stream): while the disk has room
// every demoted block enters it; once it is full, the policy weighs each against the
// blocks it would push out.
//
// Thread safety: Create, endpoints, registered and Drain from one controlling thread;
// the server and the coordinator thread run on their own.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/metrics.h"
#include "services/auth/token_store.h"

namespace kvtier::store {

struct StoreNodeOptions {
  KvtierConfig config;  // store.*, data_dir, tls, coordinator.max_message_bytes
  auth::TokenStore tokens = auth::TokenStore::Disabled();  // the tenants it serves
  MetricsRegistry* registry = nullptr;                     // required; outlives the node
  std::string node_id;                                     // required
  std::string coordinator_token;                           // this node's token at the coordinator
  std::chrono::milliseconds tick{100};                     // events reach the coordinator within it
};

class StoreNode {
 public:
  // kUnavailable when the listener cannot bind or the data directory cannot be opened;
  // kInvalidArgument for a bad configuration. The coordinator need not be up yet.
  [[nodiscard]] static Result<std::unique_ptr<StoreNode>> Create(StoreNodeOptions options);
  ~StoreNode();

  const std::vector<std::string>& endpoints() const;
  // Ok while its listeners accept connections (rpc_server.h's Readiness()).
  [[nodiscard]] Status Readiness() const;
  // Registered with the coordinator and its snapshot sent: ready for traffic.
  bool registered() const;
  // Leaves the coordinator, stops serving and flushes the disk tier. Idempotent; returns
  // the first failure (the node is stopped either way).
  [[nodiscard]] Status Drain();

  class Impl;

 private:
  explicit StoreNode(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::store
