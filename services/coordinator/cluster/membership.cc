#include "services/coordinator/cluster/membership.h"

#include <algorithm>

namespace kvtier::coordinator {

Result<RegisterResult> Membership::Register(const std::string& name, NodeRole role,
                                            uint64_t incarnation, ConnectionId connection) {
  if (name.empty()) return InvalidArgumentError("node id must not be empty");
  RegisterResult result;
  auto it = by_name_.find(name);
  if (it != by_name_.end())
    KVTIER_RETURN_IF_ERROR(CheckNameFree(nodes_[it->second], incarnation, connection));
  if (it == by_name_.end()) {
    if (nodes_.size() >= kMaxNodes) {
      return ResourceExhaustedError("the cluster already has " + std::to_string(kMaxNodes) +
                                    " nodes");
    }
    it = by_name_.emplace(name, static_cast<NodeId>(nodes_.size())).first;
    nodes_.push_back(Node{name});
  }
  Node& node = nodes_[it->second];
  const bool same_process = node.live && node.incarnation == incarnation;
  result.restarted = node.live && node.incarnation != incarnation;
  if (!same_process) {
    // A new process (or one back after its lease ran out): its holdings are unknown until
    // it sends a snapshot.
    node.incarnation = incarnation;
    node.next_sequence = 0;
    node.awaiting_snapshot = true;
    ++stats_.resyncs;
  }
  node.live = true;
  node.connection = connection;
  node.role = role;
  node.lease_id = next_lease_id_++;
  node.lease_deadline = options_.clock->Now() + options_.lease_ttl;
  result.node = it->second;
  result.lease_id = node.lease_id;
  result.snapshot_required = node.awaiting_snapshot;
  return result;
}

Status Membership::CheckNameFree(const Node& node, uint64_t incarnation, ConnectionId connection) {
  if (!node.live || node.incarnation == incarnation || node.connection == kNoConnection ||
      node.connection == connection) {
    return Status::Ok();
  }
  ++stats_.name_conflicts;
  const auto lease_left = std::chrono::duration_cast<std::chrono::milliseconds>(
      node.lease_deadline - options_.clock->Now());
  return AlreadyExistsError(
      "node name \"" + node.name + "\" is held by a live node (incarnation " +
      std::to_string(node.incarnation) +
      ", still connected): every node needs a name of its own. "
      "A restarted node is let in once its predecessor's connection closes or its lease lapses "
      "(in " +
      std::to_string(std::max<int64_t>(0, lease_left.count())) + " ms)");
}

void Membership::Disconnected(ConnectionId connection) {
  if (connection == kNoConnection) return;
  for (Node& node : nodes_) {
    if (node.connection == connection) node.connection = kNoConnection;
  }
}

Result<Membership::Node*> Membership::LiveNode(const std::string& name) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return NotFoundError("node \"" + name + "\" is not registered");
  Node& node = nodes_[it->second];
  if (!node.live) return NotFoundError("node \"" + name + "\" has no live lease: register again");
  return &node;
}

Status Membership::Heartbeat(const std::string& name, uint64_t lease_id) {
  KVTIER_ASSIGN_OR_RETURN(Node * node, LiveNode(name));
  if (node->lease_id != lease_id) {
    return NotFoundError("node \"" + name + "\": lease " + std::to_string(lease_id) +
                         " is not its current lease");
  }
  node->lease_deadline = options_.clock->Now() + options_.lease_ttl;
  return Status::Ok();
}

Result<NodeId> Membership::Leave(const std::string& name, uint64_t lease_id) {
  KVTIER_ASSIGN_OR_RETURN(Node * node, LiveNode(name));
  if (node->lease_id != lease_id) {
    return NotFoundError("node \"" + name + "\": lease " + std::to_string(lease_id) +
                         " is not its current lease");
  }
  node->live = false;
  return by_name_.at(name);
}

std::vector<NodeId> Membership::ExpireLeases() {
  std::vector<NodeId> expired;
  const Nanos now = options_.clock->Now();
  for (size_t id = 0; id < nodes_.size(); ++id) {
    Node& node = nodes_[id];
    if (node.live && node.lease_deadline <= now) {
      node.live = false;
      expired.push_back(static_cast<NodeId>(id));
      ++stats_.lease_expiries;
    }
  }
  return expired;
}

Result<BatchCheck> Membership::CheckBatch(const std::string& name, uint64_t incarnation,
                                          uint64_t first_sequence, size_t count) {
  KVTIER_ASSIGN_OR_RETURN(Node * node, LiveNode(name));
  if (incarnation != node->incarnation) {
    return FailedPreconditionError("node \"" + name + "\": events of incarnation " +
                                   std::to_string(incarnation) + " but the registered one is " +
                                   std::to_string(node->incarnation));
  }
  BatchCheck check;
  check.next_sequence = node->next_sequence;
  if (node->awaiting_snapshot) {
    check.verdict = BatchVerdict::kSnapshotRequired;
    return check;
  }
  if (first_sequence > node->next_sequence) {  // events were lost in between
    ++stats_.sequence_gaps;
    RequireSnapshot(static_cast<NodeId>(by_name_.at(name)));
    check.verdict = BatchVerdict::kSnapshotRequired;
    return check;
  }
  check.skip = static_cast<size_t>(std::min<uint64_t>(node->next_sequence - first_sequence, count));
  stats_.duplicate_events += check.skip;
  check.verdict = check.skip == count ? BatchVerdict::kDuplicate : BatchVerdict::kApply;
  return check;
}

void Membership::Applied(NodeId id, uint64_t first_sequence, size_t count) {
  Node& node = nodes_[id];
  node.next_sequence = std::max(node.next_sequence, first_sequence + count);
}

void Membership::RequireSnapshot(NodeId id) {
  if (!nodes_[id].awaiting_snapshot) ++stats_.resyncs;
  nodes_[id].awaiting_snapshot = true;
}

Result<NodeId> Membership::SnapshotApplied(const std::string& name, uint64_t incarnation,
                                           uint64_t next_sequence) {
  KVTIER_ASSIGN_OR_RETURN(Node * node, LiveNode(name));
  if (incarnation != node->incarnation) {
    return FailedPreconditionError("node \"" + name + "\": snapshot of incarnation " +
                                   std::to_string(incarnation) + " but the registered one is " +
                                   std::to_string(node->incarnation));
  }
  node->awaiting_snapshot = false;
  node->next_sequence = next_sequence;
  return by_name_.at(name);
}

Result<NodeId> Membership::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return NotFoundError("node \"" + name + "\" is not registered");
  return it->second;
}

std::vector<NodeId> Membership::LiveNodes() const {
  std::vector<NodeId> live;
  for (size_t id = 0; id < nodes_.size(); ++id) {
    if (nodes_[id].live) live.push_back(static_cast<NodeId>(id));
  }
  return live;
}

MembershipStats Membership::Stats() const {
  MembershipStats stats = stats_;
  stats.live_nodes = LiveNodes().size();
  return stats;
}

}  // namespace kvtier::coordinator
