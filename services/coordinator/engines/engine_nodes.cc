#include "services/coordinator/engines/engine_nodes.h"

#include <spdlog/spdlog.h>

namespace kvtier::coordinator {

std::vector<std::string> EngineNodes::Apply(std::vector<EngineUpdate>& updates) {
  std::vector<std::string> resync;
  for (EngineUpdate& update : updates) {
    if (update.kind == EngineUpdate::Kind::kLeave) {
      auto it = nodes_.find(update.node);
      if (it == nodes_.end()) continue;
      if (it->second.registered) (void)coordinator_.Leave(update.node, it->second.lease_id);
      nodes_.erase(it);
      continue;
    }
    Instance& instance = nodes_[update.node];
    if (Status s = EnsureRegistered(update.node, instance); !s.ok()) {
      ++stats_.refused_batches;
      spdlog::warn("engine instance {}: cannot join the index: {}", update.node, s.ToString());
      continue;
    }
    if (update.kind == EngineUpdate::Kind::kSnapshot) {
      ApplySnapshot(update, instance);
    } else if (instance.awaiting_snapshot) {
      // Its events are in the snapshot asked for; once per instance in this
      // batch of updates.
      if (std::find(resync.begin(), resync.end(), update.node) == resync.end())
        resync.push_back(update.node);
    } else {
      ApplyEvents(update, instance, resync);
    }
  }
  return resync;
}

Status EngineNodes::EnsureRegistered(const std::string& name, Instance& instance) {
  if (instance.registered && coordinator_.LiveRole(name).has_value()) return Status::Ok();
  Registration registration{
      .node = name, .role = NodeRole::kEngine, .incarnation = next_incarnation_++};
  for (Tier tier : {Tier::kGpu, Tier::kHost, Tier::kDisk})
    registration.pools.push_back(PoolInfo{.tier = tier});
  KVTIER_ASSIGN_OR_RETURN(const RegisterResult registered, coordinator_.Register(registration));
  instance.incarnation = registration.incarnation;
  instance.lease_id = registered.lease_id;
  instance.next_sequence = 0;
  instance.awaiting_snapshot = true;
  instance.registered = true;
  return Status::Ok();
}

std::optional<ScopeId> EngineNodes::ScopeOf(const EngineUpdate& update) {
  Result<ScopeId> scope = scopes_.Intern(update.salt_scope);
  if (scope.ok()) return *scope;
  ++stats_.refused_batches;
  spdlog::warn("engine instance {}: {}", update.node, scope.status().ToString());
  return std::nullopt;
}

void EngineNodes::ApplySnapshot(EngineUpdate& update, Instance& instance) {
  const std::optional<ScopeId> scope = ScopeOf(update);
  if (!scope) return;
  for (SnapshotBlock& b : update.blocks) b.scope = *scope;
  const NodeSnapshot snapshot{.node = update.node,
                              .incarnation = instance.incarnation,
                              .next_sequence = instance.next_sequence,
                              .blocks = std::move(update.blocks)};
  if (Status s = coordinator_.PublishSnapshot(snapshot); !s.ok()) {
    ++stats_.refused_batches;
    spdlog::warn("engine instance {}: the index refused its snapshot: {}", update.node,
                 s.ToString());
    return;
  }
  instance.awaiting_snapshot = false;
  ++stats_.snapshots;
}

void EngineNodes::ApplyEvents(EngineUpdate& update, Instance& instance,
                              std::vector<std::string>& resync) {
  if (update.events.empty()) return;
  const std::optional<ScopeId> scope = ScopeOf(update);
  if (!scope) return;
  for (KvEvent& e : update.events) e.scope = *scope;
  const size_t count = update.events.size();
  EventBatch batch{.node = update.node,
                   .incarnation = instance.incarnation,
                   .first_sequence = instance.next_sequence,
                   .events = std::move(update.events)};
  Result<EventAck> ack = coordinator_.PublishEvents(batch);
  ++stats_.batches;
  if (!ack.ok()) {
    // A batch the index cannot take (it checks every event first): nothing of
    // it applied.
    ++stats_.refused_batches;
    spdlog::warn("engine instance {}: the index refused a batch: {}", update.node,
                 ack.status().ToString());
    instance.awaiting_snapshot = true;
    resync.push_back(update.node);
    return;
  }
  instance.next_sequence += count;
  if (ack->verdict == BatchVerdict::kSnapshotRequired) {
    instance.awaiting_snapshot = true;
    instance.next_sequence = ack->next_sequence;
    resync.push_back(update.node);
  }
}

void EngineNodes::Tick() {
  for (auto& [name, instance] : nodes_) {
    if (!instance.registered) continue;
    if (!coordinator_.Heartbeat(name, instance.lease_id, 0).ok()) instance.registered = false;
  }
}

}  // namespace kvtier::coordinator
