// EngineNodes: inference engines as nodes of the coordinator's index.
//
// The engine feed (engine_feed.h) turns each engine instance's KV events into
// index events; here they meet the Coordinator as a node's would: an instance
// registers (role kEngine, named "<engine>" or "<engine>/dp<rank>"), publishes
// a snapshot when the coordinator asks for one (at registration, after a lease
// lapsed), then sequenced event batches. Leases are renewed every Tick(), so an
// instance stays in the index while its engine is configured, and leaves it
// when the engine is removed.
//
// Thread safety: none; runs on the coordinator's event-loop thread.
// Ownership: the coordinator and the scope registry outlive it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "services/coordinator/cluster/coordinator.h"
#include "services/coordinator/cluster/scope_registry.h"

namespace kvtier::coordinator {

// What the feed hands the coordinator for one engine instance.
struct EngineUpdate {
  enum class Kind { kEvents, kSnapshot, kLeave };
  Kind kind = Kind::kEvents;
  std::string node = {};
  uint64_t salt_scope = 0;                 // the engine's tenant: the scope of its blocks
  std::vector<KvEvent> events = {};        // kEvents
  std::vector<SnapshotBlock> blocks = {};  // kSnapshot: everything the instance holds
};

struct EngineNodesStats {
  uint64_t batches = 0;
  uint64_t refused_batches = 0;  // batches the coordinator refused (logged)
  uint64_t snapshots = 0;
};

class EngineNodes {
 public:
  EngineNodes(Coordinator& coordinator, ScopeRegistry& scopes)
      : coordinator_(coordinator), scopes_(scopes) {}

  // Applies `updates` in order. Returns the instances whose full state the
  // coordinator needs (a kSnapshot update from the feed): their events were not
  // applied.
  [[nodiscard]] std::vector<std::string> Apply(std::vector<EngineUpdate>& updates);
  // Renews every instance's lease; an instance whose lease lapsed registers
  // again on its next update (and is then asked for a snapshot).
  void Tick();

  size_t nodes() const { return nodes_.size(); }
  const EngineNodesStats& stats() const { return stats_; }

 private:
  struct Instance {
    uint64_t incarnation = 0;
    uint64_t lease_id = 0;
    uint64_t next_sequence = 0;
    bool awaiting_snapshot = true;
    bool registered = false;
  };
  // Registers `name` where it is not (or no longer) registered.
  Status EnsureRegistered(const std::string& name, Instance& instance);
  // The tenant's dense scope id; nullopt (counted, logged) past the registry's limit.
  std::optional<ScopeId> ScopeOf(const EngineUpdate& update);
  void ApplyEvents(EngineUpdate& update, Instance& instance, std::vector<std::string>& resync);
  void ApplySnapshot(EngineUpdate& update, Instance& instance);

  Coordinator& coordinator_;
  ScopeRegistry& scopes_;
  std::unordered_map<std::string, Instance> nodes_;
  uint64_t next_incarnation_ = 1;
  EngineNodesStats stats_;
};

}  // namespace kvtier::coordinator
