// Membership: the nodes of the cluster, their leases, and the order of their event streams.
//
// A node registers with a stable name and an incarnation (a new value on every process
// start) and gets a dense NodeId and a lease. Heartbeats renew the lease; a lease not
// renewed within its TTL expires, and ExpireLeases() reports the node so that the caller
// drops its locations. Every event batch carries the node's incarnation and the sequence
// number of its first event. CheckBatch() decides what to apply:
//   - events below the next expected number are duplicates and are skipped;
//   - a batch that starts above it leaves a gap: nothing is applied, the stream waits for
//     a snapshot (snapshot_required), and later batches are refused until one arrives;
//   - a batch from an old incarnation is stale and refused.
// A snapshot resets the stream: it reflects every event before its next_sequence.
//
// Names are unique. A registration carries the connection it came on (an id the RPC
// layer assigns; kNoConnection where none is tracked). A new incarnation of a live node
// is a restart, and replaces the old one, unless the old one registered on another
// connection that is still open: then two processes share a name, and the newcomer is
// refused (kAlreadyExists) until that connection closes (Disconnected) or the old
// lease lapses, so that the two do not take the lease from each other in turn.
//
// Thread safety: none; owned by the Coordinator on its event-loop thread.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "services/coordinator/index/block_index.h"

namespace kvtier::coordinator {

using ConnectionId = uint64_t;
inline constexpr ConnectionId kNoConnection = 0;

struct MembershipOptions {
  Nanos lease_ttl = std::chrono::seconds(10);
  const Clock* clock = &SystemClock::Instance();
};

struct RegisterResult {
  NodeId node = 0;
  uint64_t lease_id = 0;
  bool snapshot_required = false;  // the index holds nothing for this incarnation yet
  bool restarted = false;          // a known node came back with a new incarnation
};

enum class BatchVerdict { kApply, kDuplicate, kSnapshotRequired };

struct BatchCheck {
  BatchVerdict verdict = BatchVerdict::kApply;
  size_t skip = 0;             // leading events already applied
  uint64_t next_sequence = 0;  // what the node should send next
};

struct MembershipStats {
  size_t live_nodes = 0;
  uint64_t lease_expiries = 0;
  uint64_t sequence_gaps = 0;
  uint64_t duplicate_events = 0;
  uint64_t resyncs = 0;         // snapshots asked for (gaps, restarts, lost events)
  uint64_t name_conflicts = 0;  // registrations refused: the name is held on an open connection
};

class Membership {
 public:
  explicit Membership(const MembershipOptions& options) : options_(options) {}

  // kInvalidArgument for an empty name; kResourceExhausted past kMaxNodes names;
  // kAlreadyExists when another live incarnation holds the name on another open
  // connection (above).
  [[nodiscard]] Result<RegisterResult> Register(const std::string& name, NodeRole role,
                                                uint64_t incarnation, ConnectionId connection);
  // `connection` closed: the nodes registered on it no longer hold their names against a
  // new incarnation (their leases run on).
  void Disconnected(ConnectionId connection);
  // kNotFound for an unknown node, an expired lease or another lease id: register again.
  [[nodiscard]] Status Heartbeat(const std::string& name, uint64_t lease_id);
  // The node leaves now (a store draining): it is no longer live. kNotFound for an
  // unknown node or another lease. Returns its id, for its locations to be dropped.
  [[nodiscard]] Result<NodeId> Leave(const std::string& name, uint64_t lease_id);
  // Nodes whose leases ran out since the last call; they are no longer live.
  std::vector<NodeId> ExpireLeases();

  // kNotFound for an unknown or expired node, kFailedPrecondition for a stale incarnation.
  [[nodiscard]] Result<BatchCheck> CheckBatch(const std::string& name, uint64_t incarnation,
                                              uint64_t first_sequence, size_t count);
  // Records that events up to first_sequence + count - 1 were applied.
  void Applied(NodeId node, uint64_t first_sequence, size_t count);
  // The stream lost an event the index needed (e.g. a stored block's parent): resync.
  void RequireSnapshot(NodeId node);
  // A snapshot replaced the node's holdings; it reflects every event before next_sequence.
  [[nodiscard]] Result<NodeId> SnapshotApplied(const std::string& name, uint64_t incarnation,
                                               uint64_t next_sequence);

  [[nodiscard]] Result<NodeId> Find(const std::string& name) const;
  bool live(NodeId node) const { return node < nodes_.size() && nodes_[node].live; }
  const std::string& name(NodeId node) const { return nodes_[node].name; }
  std::vector<NodeId> LiveNodes() const;
  NodeRole role(NodeId node) const { return nodes_[node].role; }
  MembershipStats Stats() const;

 private:
  struct Node {
    std::string name;
    NodeRole role = NodeRole::kWorker;
    uint64_t incarnation = 0;
    uint64_t lease_id = 0;
    Nanos lease_deadline{0};
    ConnectionId connection = kNoConnection;  // the one it registered on, while open
    uint64_t next_sequence = 0;
    bool live = false;
    bool awaiting_snapshot = false;
  };
  Result<Node*> LiveNode(const std::string& name);
  // kAlreadyExists when `node` is held against this registration (see the file comment).
  Status CheckNameFree(const Node& node, uint64_t incarnation, ConnectionId connection);

  MembershipOptions options_;
  std::vector<Node> nodes_;  // indexed by NodeId
  std::unordered_map<std::string, NodeId> by_name_;
  uint64_t next_lease_id_ = 1;
  MembershipStats stats_;
};

}  // namespace kvtier::coordinator
