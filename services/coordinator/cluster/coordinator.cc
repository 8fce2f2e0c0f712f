#include "services/coordinator/cluster/coordinator.h"

#include <cmath>

#include <unordered_map>

#include "services/coordinator/cluster/parent_lookahead.h"
#include "services/coordinator/cluster/waiting_children.h"

namespace kvtier::coordinator {
namespace {

bool ValidTier(Tier tier) { return static_cast<int>(tier) < kTierCount; }

// A stored event's chain, at the node that sent it. It borrows the event's vectors.
StoreRequest StoredBy(NodeId node, const KvEvent& e) {
  return {e.scope, e.parent, e.keys, {node, e.tier, e.pool}, e.retention, e.tokens};
}

// The checks that need no index state, for every event before any is applied.
Status ValidateEvent(const KvEvent& e) {
  if (!ValidTier(e.tier) || (e.kind == KvEvent::Kind::kTierChanged && !ValidTier(e.to_tier))) {
    return InvalidArgumentError("unknown tier");
  }
  if (e.kind != KvEvent::Kind::kStored) return Status::Ok();
  if (e.keys.empty()) return InvalidArgumentError("a stored event names no blocks");
  return ValidateStoredBlocks(e.keys, e.retention, e.tokens.size());
}

}  // namespace

Result<std::unique_ptr<Coordinator>> Coordinator::Create(const CoordinatorOptions& options) {
  if (options.membership.lease_ttl.count() <= 0)
    return InvalidArgumentError("lease_ttl must be positive");
  if (!(options.overlap_weight >= 0))
    return InvalidArgumentError("overlap_weight must be non-negative");
  if (options.max_refused_keys == 0)
    return InvalidArgumentError("max_refused_keys must be positive");
  if (options.max_waiting_blocks == 0)
    return InvalidArgumentError("max_waiting_blocks must be positive");
  if (options.orphan_wait.count() < 0)
    return InvalidArgumentError("orphan_wait must not be negative");
  if (options.routed_load_half_life.count() < 0)
    return InvalidArgumentError("routed_load_half_life must not be negative");
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<BlockIndex> index, BlockIndex::Create(options.index));
  return std::unique_ptr<Coordinator>(new Coordinator(options, std::move(index)));
}

Coordinator::Coordinator(const CoordinatorOptions& options, std::unique_ptr<BlockIndex> index)
    : options_(options),
      index_(std::move(index)),
      membership_(options.membership),
      refused_(options.max_refused_keys),
      waiting_(std::make_unique<WaitingChildren>(WaitingChildrenOptions{
          .wait = options.orphan_wait, .max_blocks = options.max_waiting_blocks})),
      routed_(options.routed_load_half_life) {}

Coordinator::~Coordinator() = default;

Result<RegisterResult> Coordinator::Register(const Registration& registration) {
  const std::vector<PoolInfo>& pools = registration.pools;
  // Checked before membership changes; the node's id is set once it has one.
  std::vector<PoolWindowSpec> windows;
  windows.reserve(pools.size());
  for (const PoolInfo& p : pools) windows.push_back({{0, p.tier, p.pool}, p.window});
  KVTIER_RETURN_IF_ERROR(ValidatePoolWindows(windows));
  KVTIER_ASSIGN_OR_RETURN(RegisterResult result,
                          membership_.Register(registration.node, registration.role,
                                               registration.incarnation, registration.connection));
  if (result.snapshot_required) DropNode(result.node);  // old holdings are unknown now
  NodeCapacity capacity;
  for (size_t i = 0; i < pools.size(); ++i) {
    capacity.blocks[static_cast<int>(pools[i].tier)] += pools[i].capacity_blocks;
    capacity.bytes[static_cast<int>(pools[i].tier)] += pools[i].capacity_bytes;
    windows[i].pool.node = result.node;
  }
  if (index_->SetNodeWindows(result.node, windows).code() == StatusCode::kFailedPrecondition) {
    // The windows changed under blocks the index holds: their counts would be wrong.
    DropNode(result.node);
    membership_.RequireSnapshot(result.node);
    result.snapshot_required = true;
    KVTIER_RETURN_IF_ERROR(index_->SetNodeWindows(result.node, windows));
  }
  if (result.node >= active_blocks_.size()) {
    active_blocks_.resize(result.node + 1, 0);
    capacity_.resize(result.node + 1);
  }
  active_blocks_[result.node] = 0;
  capacity_[result.node] = capacity;
  return result;
}

Status Coordinator::Heartbeat(const std::string& node, uint64_t lease_id, uint64_t active_blocks) {
  KVTIER_RETURN_IF_ERROR(membership_.Heartbeat(node, lease_id));
  active_blocks_[*membership_.Find(node)] = active_blocks;
  return Status::Ok();
}

Status Coordinator::Apply(NodeId node, const KvEvent& e) {
  // A later word of the node on a block it parked: the parked event is out of date.
  if (!waiting_->empty() && e.kind != KvEvent::Kind::kCleared)
    orphaned_blocks_ += waiting_->Touch(node, e);
  switch (e.kind) {
    case KvEvent::Kind::kStored: return StoreChainAndAdopt(node, StoredBy(node, e));
    case KvEvent::Kind::kRemoved:
      index_->Remove({node, e.tier, e.pool}, e.keys);
      return Status::Ok();
    case KvEvent::Kind::kTierChanged:
      index_->ChangeTier({node, e.tier, e.pool}, {node, e.to_tier, e.to_pool}, e.keys);
      return Status::Ok();
    case KvEvent::Kind::kCleared: DropNode(node); return Status::Ok();
  }
  return InvalidArgumentError("unknown event kind");
}

Status Coordinator::StoreChain(NodeId node, const StoreRequest& request) {
  Status stored = index_->Store(request);
  // kFailedPrecondition is the index's "parent not indexed". Where this coordinator left
  // that parent out itself, no event was lost: the child is left out as well.
  if (stored.code() == StatusCode::kFailedPrecondition && request.parent.has_value() &&
      refused_.Contains(node, *request.parent)) {
    ++refused_children_;
    stored = ResourceExhaustedError("parent block " + request.parent->ToHex() +
                                    " was left out of the full index");
  }
  if (stored.code() == StatusCode::kResourceExhausted) refused_.Add(node, request.keys);
  return stored;
}

Status Coordinator::StoreChainAndAdopt(NodeId node, const StoreRequest& request) {
  Status stored = StoreChain(node, request);
  if (!stored.ok() || waiting_->empty()) return stored;
  // Breadth first over the blocks just stored: a waiting chain may wait on any of them.
  std::vector<BlockKey> parents(request.keys.begin(), request.keys.end());
  for (size_t p = 0; p < parents.size() && !waiting_->empty(); ++p) {
    for (const ParkedEvent& child : waiting_->TakeChildren(parents[p])) {
      const std::vector<BlockKey>& keys = child.event.keys;
      const Status adopted = StoreChain(child.node, StoredBy(child.node, child.event));
      if (adopted.ok()) {
        adopted_blocks_ += keys.size();
        parents.insert(parents.end(), keys.begin(), keys.end());
      } else if (adopted.code() != StatusCode::kResourceExhausted) {
        // The index cannot take it after all (a chain that disagrees with another
        // node's): left out, as an orphan; the node's own stream stays in step.
        orphaned_blocks_ += keys.size();
      }  // kResourceExhausted: a full index, counted there.
    }
  }
  return stored;
}

void Coordinator::Park(NodeId node, const KvEvent& event) {
  orphaned_blocks_ += waiting_->Park(node, event, options_.membership.clock->Now());
}

void Coordinator::DropNode(NodeId node) {
  index_->RemoveNode(node);
  routed_.Forget(node);
  refused_.Forget(node);
  waiting_->DropNode(node);
}

void Coordinator::KeepWaitersValid(NodeId node, std::span<const KvEvent> events, Waiting& waiting,
                                   size_t event, size_t from, size_t to) {
  const auto it = waiting.find(event);
  if (it == waiting.end()) return;
  const std::vector<size_t> waiters = it->second;  // the calls below change the map
  std::vector<size_t> kept;
  for (size_t waiter : waiters) {
    if (const std::optional<size_t> by = SupersededAt(events, waiter, from, to)) {
      if (LeavesBlocksUnindexed(events[*by], events[waiter]))
        orphaned_blocks_ += events[waiter].keys.size();
      ParkWaiters(node, events, waiting, waiter);
    } else {
      kept.push_back(waiter);
      KeepWaitersValid(node, events, waiting, waiter, from, to);
    }
  }
  if (kept.empty()) {
    waiting.erase(event);
  } else {
    waiting[event] = std::move(kept);
  }
}

void Coordinator::ParkWaiters(NodeId node, std::span<const KvEvent> events, Waiting& waiting,
                              size_t event) {
  const auto it = waiting.find(event);
  if (it == waiting.end()) return;
  const std::vector<size_t> waiters = std::move(it->second);
  waiting.erase(it);
  for (size_t waiter : waiters) {
    Park(node, events[waiter]);
    ParkWaiters(node, events, waiting, waiter);
  }
}

Result<EventAck> Coordinator::PublishEvents(const EventBatch& batch) {
  for (size_t i = 0; i < batch.events.size(); ++i) {
    Status s = ValidateEvent(batch.events[i]);
    if (!s.ok())
      return s.WithContext("node \"" + batch.node + "\" event " +
                           std::to_string(batch.first_sequence + i));
  }
  KVTIER_ASSIGN_OR_RETURN(const BatchCheck check,
                          membership_.CheckBatch(batch.node, batch.incarnation,
                                                 batch.first_sequence, batch.events.size()));
  if (check.verdict != BatchVerdict::kApply) return EventAck{check.verdict, check.next_sequence};
  const NodeId node = *membership_.Find(batch.node);
  // Stored events waiting for a later event of the batch that stores their parent, by it.
  // Everything handled while the loop is at event i is applied after events [0, i] (but
  // those waiting); an event waiting moves past no event that supersedes it.
  Waiting waiting;
  std::vector<size_t> due;
  for (size_t i = check.skip; i < batch.events.size(); ++i) {
    due.assign(1, i);  // i, then the events that waited for it (and for those), in order
    for (size_t d = 0; d < due.size(); ++d) {
      const size_t at = due[d];
      const KvEvent& event = batch.events[at];
      const Status applied = Apply(node, event);
      if (applied.code() == StatusCode::kFailedPrecondition) {  // the index holds no parent
        if (std::optional<size_t> later = LaterParentStore(batch.events, at, i)) {
          // Those waiting for this event move with it past (i, later]: one that an event
          // there supersedes stays out, and those waiting for it are parked.
          KeepWaitersValid(node, batch.events, waiting, at, i, *later);
          waiting[*later].push_back(at);
          continue;
        }
        // No node holds the parent now: the block waits for another node's stream to
        // bring it (waiting_children.h), and is an orphan if none does.
        Park(node, event);
      } else if (applied.code() == StatusCode::kResourceExhausted) {
        // The index is at max_blocks: the chain stays out of it (lookups miss it, which
        // is never wrong) and the stream goes on; a resync would not make room. Counted
        // in the index's refused_full (or refused_children).
      } else if (!applied.ok()) {
        // The index cannot take the event (a chain that disagrees with what it holds):
        // the node and this coordinator disagree. Keep what was applied, ask for the truth.
        membership_.Applied(node, batch.first_sequence, i);
        membership_.RequireSnapshot(node);
        return EventAck{BatchVerdict::kSnapshotRequired, batch.first_sequence + i};
      }
      // Whatever became of it, the events that waited for it go next: applied after their
      // parent, or, where it stayed out, looking on for another store of it.
      if (auto w = waiting.find(at); w != waiting.end()) {
        due.insert(due.end(), w->second.begin(), w->second.end());
        waiting.erase(w);
      }
    }
  }
  membership_.Applied(node, batch.first_sequence, batch.events.size());
  return EventAck{BatchVerdict::kApply, batch.first_sequence + batch.events.size()};
}

Status Coordinator::PublishSnapshot(const NodeSnapshot& snapshot) {
  KVTIER_ASSIGN_OR_RETURN(const NodeId node, membership_.Find(snapshot.node));
  std::unordered_map<BlockKey, size_t, BlockKeyHash> position;
  for (size_t i = 0; i < snapshot.blocks.size(); ++i) {
    const SnapshotBlock& b = snapshot.blocks[i];
    if (!ValidTier(b.tier))
      return InvalidArgumentError("snapshot block " + std::to_string(i) + ": unknown tier");
    if (b.retention.priority > kMaxPriority) {
      return InvalidArgumentError("snapshot block " + std::to_string(i) + ": priority " +
                                  std::to_string(b.retention.priority) +
                                  " is out of range [0, 100]");
    }
    position.emplace(b.key, i);
  }
  KVTIER_RETURN_IF_ERROR(
      membership_.SnapshotApplied(snapshot.node, snapshot.incarnation, snapshot.next_sequence)
          .status());
  DropNode(node);
  // Store parents before children: for each block, collect its ancestors that the snapshot
  // also holds (stopping at a stored one, or after n steps on a malformed cycle) and store
  // them root first. A block whose parent is held nowhere cannot be reached by a lookup:
  // the index refuses it and it waits for another node to bring the parent, as an event
  // would.
  std::vector<bool> done(snapshot.blocks.size(), false);
  std::vector<size_t> chain;
  for (size_t i = 0; i < snapshot.blocks.size(); ++i) {
    chain.clear();
    for (size_t at = i; !done[at] && chain.size() <= snapshot.blocks.size();) {
      chain.push_back(at);
      const auto parent =
          snapshot.blocks[at].parent ? position.find(*snapshot.blocks[at].parent) : position.end();
      if (parent == position.end()) break;
      at = parent->second;
    }
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      if (done[*it]) continue;
      done[*it] = true;
      const SnapshotBlock& b = snapshot.blocks[*it];
      const Status stored =
          StoreChainAndAdopt(node, {b.scope,
                                    b.parent,
                                    std::span<const BlockKey>(&b.key, 1),
                                    {node, b.tier, b.pool},
                                    std::span<const BlockRetention>(&b.retention, 1),
                                    b.tokens});
      if (stored.code() == StatusCode::kFailedPrecondition) {
        Park(node, {.kind = KvEvent::Kind::kStored,
                    .scope = b.scope,
                    .parent = b.parent,
                    .keys = {b.key},
                    .tier = b.tier,
                    .pool = b.pool,
                    .retention = {b.retention},
                    .tokens = b.tokens});
      }
    }
  }
  return Status::Ok();
}

LookupResult Coordinator::Lookup(ScopeId scope, std::span<const BlockKey> keys,
                                 std::span<const uint32_t> tail_tokens) {
  return index_->Lookup(scope, keys, tail_tokens);
}

Result<RouteChoice> Coordinator::Route(ScopeId scope, const RouteQuery& query) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<WorkerLoad> workers, RoutableWorkers(query));
  const LookupResult lookup = index_->Lookup(scope, query.keys, query.tail_tokens);
  const RouteChoice choice = ChooseWorker(lookup, {query.keys.size(), query.tail_tokens.size()},
                                          workers, options_.overlap_weight);
  RecordRoute(query, choice.node);
  return choice;
}

void Coordinator::RecordRoute(const RouteQuery& query, NodeId chosen) {
  if (!query.candidate_active_blocks.empty() || !membership_.live(chosen) ||
      membership_.role(chosen) != NodeRole::kEngine)
    return;
  const size_t blocks = query.keys.size() + (query.tail_tokens.empty() ? 0 : 1);
  routed_.Add(chosen, static_cast<double>(blocks), options_.membership.clock->Now());
}

Result<std::vector<RouteChoice>> Coordinator::RouteAll(ScopeId scope, const RouteQuery& query) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<WorkerLoad> workers, RoutableWorkers(query));
  const LookupResult lookup = index_->Lookup(scope, query.keys, query.tail_tokens);
  return ScoreWorkers(lookup, {query.keys.size(), query.tail_tokens.size()}, workers,
                      options_.overlap_weight);
}

Result<std::vector<WorkerLoad>> Coordinator::RoutableWorkers(const RouteQuery& query) const {
  const auto& loads = query.candidate_active_blocks;
  if (!loads.empty() && loads.size() != query.candidates.size()) {
    return InvalidArgumentError(std::to_string(loads.size()) + " candidate loads for " +
                                std::to_string(query.candidates.size()) +
                                " candidates: one each, in the candidates' order");
  }
  std::vector<WorkerLoad> workers;
  const auto add_if_live_worker = [&](NodeId node, uint64_t active_blocks) {
    if (membership_.live(node) && membership_.role(node) != NodeRole::kStore) {
      workers.push_back({node, active_blocks});
    }
  };
  // The heartbeats' load, and for an engine (which sends none) what was routed to it.
  const Nanos now = options_.membership.clock->Now();
  const auto known_load = [&](NodeId node) {
    const double routed =
        membership_.role(node) == NodeRole::kEngine ? routed_.Get(node, now) : 0.0;
    return active_blocks_[node] + static_cast<uint64_t>(std::llround(routed));
  };
  if (query.candidates.empty()) {
    for (NodeId node : membership_.LiveNodes()) add_if_live_worker(node, known_load(node));
  } else {
    for (size_t i = 0; i < query.candidates.size(); ++i) {
      if (Result<NodeId> node = membership_.Find(query.candidates[i]); node.ok())
        add_if_live_worker(*node, loads.empty() ? known_load(*node) : loads[i]);
    }
  }
  if (workers.empty()) {
    return UnavailableError(query.candidates.empty()
                                ? std::string("no live worker to route to")
                                : "none of the " + std::to_string(query.candidates.size()) +
                                      " candidates is a live worker");
  }
  return workers;
}

Status Coordinator::Leave(const std::string& node, uint64_t lease_id) {
  KVTIER_ASSIGN_OR_RETURN(const NodeId id, membership_.Leave(node, lease_id));
  DropNode(id);
  return Status::Ok();
}

void Coordinator::Tick() {
  for (NodeId node : membership_.ExpireLeases()) DropNode(node);
  orphaned_blocks_ += waiting_->Expire(options_.membership.clock->Now());
  index_->AdvanceTime();
}

CoordinatorStats Coordinator::Stats() const {
  CoordinatorStats stats{index_->Stats(), membership_.Stats()};
  stats.refused_children = refused_children_;
  stats.orphaned_blocks = orphaned_blocks_;
  stats.adopted_blocks = adopted_blocks_;
  stats.waiting_blocks = waiting_->blocks();
  for (NodeId node : membership_.LiveNodes()) {
    for (int t = 0; t < kTierCount; ++t) {
      stats.capacity_blocks[t] += capacity_[node].blocks[t];
      stats.capacity_bytes[t] += capacity_[node].bytes[t];
      stats.held_blocks[t] += index_->Held(node, static_cast<Tier>(t));
    }
  }
  return stats;
}

std::optional<NodeRole> Coordinator::LiveRole(const std::string& node) const {
  const Result<NodeId> id = membership_.Find(node);
  if (!id.ok() || !membership_.live(*id)) return std::nullopt;
  return membership_.role(*id);
}

}  // namespace kvtier::coordinator
