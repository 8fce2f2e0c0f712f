#include "services/coordinator/rpc/coordinator_service.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include "common/retention_limit.h"
#include "services/coordinator/rpc/lookup_answer.h"
#include "services/rpc/schema/coordinator.capnp.h"
#include "services/rpc/schema_convert.h"
#include "services/rpc/status_mapping.h"

namespace kvtier::coordinator {
namespace {

namespace schema = kvtier::rpc::schema;
using rpc::ThrowIfError;
using rpc::ThrowStatus;

using rpc::ToKey;
using rpc::ToKeys;
using rpc::ToTokens;
Tier ToTier(schema::Tier t) {
  const auto value = static_cast<uint16_t>(t);
  if (value >= kTierCount)
    ThrowStatus(InvalidArgumentError("unknown tier " + std::to_string(value)));
  return static_cast<Tier>(value);
}
// Pool ids travel as UInt32; the index keeps 16 bits of them.
uint16_t ToPool(uint32_t pool) {
  if (pool > UINT16_MAX)
    ThrowStatus(
        InvalidArgumentError("pool id " + std::to_string(pool) + " is out of range [0, 65535]"));
  return static_cast<uint16_t>(pool);
}
// A node's pools; a layout the library refuses is an error naming the pool.
std::vector<PoolInfo> ToPools(capnp::List<schema::TierCapacity>::Reader capacities) {
  std::vector<PoolInfo> pools;
  for (const auto c : capacities) {
    PoolInfo pool{ToTier(c.getTier()),
                  ToPool(c.getPoolId()),
                  c.getCapacityBlocks(),
                  c.getCapacityBytes(),
                  {}};
    if (c.hasLayout()) {
      Result<KvLayout> layout = rpc::ToLayout(c.getLayout());
      if (!layout.ok())
        ThrowStatus(layout.status().WithContext("pool " + std::to_string(c.getPoolId())));
      pool.window = WindowOf(*layout);
    }
    pools.push_back(pool);
  }
  return pools;
}
uint8_t ToPriority(uint8_t p) {
  if (p > kMaxPriority)
    ThrowStatus(
        InvalidArgumentError("priority " + std::to_string(p) + " is out of range [0, 100]"));
  return p;
}
BlockRetention ToRetention(uint8_t priority, uint64_t expiry_ms) {
  Result<Nanos> duration = RetentionFromMs(expiry_ms, "retention");
  ThrowIfError(duration.status());
  return {ToPriority(priority), *duration};
}

class CoordinatorServer final : public schema::Coordinator::Server {
 public:
  CoordinatorServer(CoordinatorState& state, CoordinatorSession session)
      : state_(state),
        salt_scope_(session.salt_scope),
        node_(session.node),
        salt_(session.salt),
        connection_(state.next_connection++),
        answers_(*state.coordinator) {}
  // The client let go of the capability, or its connection closed: the nodes it
  // registered no longer hold their names against a restarted process.
  ~CoordinatorServer() { state_.coordinator->Disconnected(connection_); }

 protected:
  kj::Promise<void> register_(RegisterContext call) override {
    RequireNode();
    const auto node = call.getParams().getNode();
    const std::string name = node.getNodeId().cStr();
    const NodeRole role =
        node.getRole() == schema::NodeRole::STORE ? NodeRole::kStore : NodeRole::kWorker;
    Result<RegisterResult> r = state_.coordinator->Register({.node = name,
                                                             .role = role,
                                                             .incarnation = node.getIncarnation(),
                                                             .pools = ToPools(node.getCapacities()),
                                                             .connection = connection_});
    if (r.status().code() == StatusCode::kAlreadyExists) {
      state_.metrics->Update(state_.coordinator->Stats());  // the conflict counts now
      // Once per name until it registers: the refused node retries every tick.
      if (state_.refused_names.insert(name).second) {
        spdlog::warn("refused node \"{}\" from {}: {}", name, node.getRpcAddress().cStr(),
                     r.status().message());
      }
    }
    ThrowIfError(r.status());
    state_.refused_names.erase(name);
    std::string& address = state_.rpc_addresses[name];
    if (r->restarted) {
      spdlog::info(
          "node \"{}\" restarted: a new incarnation from {} (before from {}) replaces the one "
          "whose "
          "connection closed",
          name, node.getRpcAddress().cStr(), address);
    }
    address = node.getRpcAddress().cStr();
    state_.metrics->Update(state_.coordinator->Stats());  // the node's capacity counts now
    auto results = call.getResults();
    results.initLease().setLeaseId(r->lease_id);
    results.getLease().setTtlMs(LeaseTtlMs());
    results.setSnapshotRequired(r->snapshot_required);
    return kj::READY_NOW;
  }

  kj::Promise<void> heartbeat(HeartbeatContext call) override {
    RequireNode();
    const auto params = call.getParams();
    ThrowIfError(state_.coordinator->Heartbeat(params.getNodeId().cStr(), params.getLeaseId(),
                                               params.getActiveBlocks()));
    auto results = call.getResults();
    results.initLease().setLeaseId(params.getLeaseId());
    results.getLease().setTtlMs(LeaseTtlMs());
    return kj::READY_NOW;
  }

  kj::Promise<void> leave(LeaveContext call) override {
    RequireNode();
    const auto params = call.getParams();
    ThrowIfError(state_.coordinator->Leave(params.getNodeId().cStr(), params.getLeaseId()));
    state_.metrics->Update(state_.coordinator->Stats());
    return kj::READY_NOW;
  }

  kj::Promise<void> publishEvents(PublishEventsContext call) override {
    RequireNode();
    const auto batch = call.getParams().getBatch();
    EventBatch plain{
        batch.getNodeId().cStr(), batch.getIncarnation(), batch.getFirstSequence(), {}};
    for (auto e : batch.getEvents()) plain.events.push_back(ToEvent(e));
    Result<EventAck> ack = state_.coordinator->PublishEvents(plain);
    ThrowIfError(ack.status());
    for (const KvEvent& e : plain.events) state_.metrics->RecordEvent(e.kind);
    state_.metrics->Update(state_.coordinator->Stats());
    auto results = call.getResults();
    results.setStatus(ack->verdict == BatchVerdict::kApply ? schema::EventAckStatus::APPLIED
                      : ack->verdict == BatchVerdict::kDuplicate
                          ? schema::EventAckStatus::DUPLICATE
                          : schema::EventAckStatus::SNAPSHOT_REQUIRED);
    results.setNextSequence(ack->next_sequence);
    return kj::READY_NOW;
  }

  kj::Promise<void> publishSnapshot(PublishSnapshotContext call) override {
    RequireNode();
    const auto chunk = call.getParams().getSnapshot();
    const std::string name = chunk.getNodeId().cStr();
    NodeSnapshot& pending = state_.pending_snapshots[name];
    pending.node = name;
    pending.incarnation = chunk.getIncarnation();
    pending.next_sequence = chunk.getNextSequence();
    for (auto b : chunk.getBlocks()) {
      const auto location = b.getLocation();
      SnapshotBlock block{ToKey(b.getKey()),
                          std::nullopt,
                          Scope(b.getSaltScope()),
                          ToTier(location.getTier()),
                          ToPool(location.getPoolId()),
                          ToRetention(b.getPriority(), b.getRetentionExpiryMs())};
      if (b.getHasParent()) block.parent = ToKey(b.getParentKey());
      block.tokens = ToTokens(b.getTokens());
      pending.blocks.push_back(std::move(block));
    }
    if (chunk.getLast()) {
      NodeSnapshot complete = std::move(pending);
      state_.pending_snapshots.erase(name);
      ThrowIfError(state_.coordinator->PublishSnapshot(complete));
      state_.metrics->Update(state_.coordinator->Stats());
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> lookup(LookupContext call) override {
    const auto request = call.getParams().getRequest();
    // The index holds keys in each tenant's key space; the answer names the client's own.
    const std::vector<BlockKey> keys = ToKeys(request.getKeys());
    const std::vector<BlockKey> salted =
        salt_.identity() ? std::vector<BlockKey>{} : salt_.Apply(keys);
    const std::span<const BlockKey> held = salt_.identity() ? keys : salted;
    if (state_.on_lookup) state_.on_lookup(held);
    const auto start = std::chrono::steady_clock::now();
    const std::optional<ScopeId> scope = state_.scopes.Find(salt_scope_);
    const std::vector<uint32_t> tail = ToTokens(request.getPartialTokens());
    LookupResult result;
    if (scope) {
      result = state_.coordinator->Lookup(*scope, held, tail);
      // The partial block's key is in the tenant's key space, which no client sees.
      if (!salt_.identity()) result.partial.key = {};
    } else {
      result.location_begin = {0};  // a scope nobody wrote under: nothing cached
    }
    state_.metrics->RecordLookup(
        result, {keys.size(), tail.size()},
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    answers_.Write(
        result, keys,
        request.getCompactLocations() ? LookupAnswerForm::kCompact : LookupAnswerForm::kFull,
        [&](capnp::MessageSize size) { return call.initResults(size).initResult(); });
    return kj::READY_NOW;
  }

  kj::Promise<void> route(RouteContext call) override {
    const auto request = call.getParams().getRequest();
    const std::vector<BlockKey> keys = salt_.Apply(ToKeys(request.getKeys()));
    const std::vector<uint32_t> tail = ToTokens(request.getPartialTokens());
    std::vector<std::string> candidates;
    candidates.reserve(request.getCandidates().size());
    for (const auto name : request.getCandidates()) candidates.emplace_back(name.cStr());
    // An unknown scope has no cached blocks; route on load alone (ScopeId 0 of another
    // tenant is never consulted: its lookup below uses a scope nobody writes).
    const std::optional<ScopeId> scope = state_.scopes.Find(salt_scope_);
    RouteQuery query{.candidates = candidates};
    if (scope) {
      query.keys = keys;
      query.tail_tokens = tail;
    }
    Result<RouteChoice> choice = state_.coordinator->Route(scope.value_or(kNoScope), query);
    ThrowIfError(choice.status());
    auto decision = call.getResults().initDecision();
    const std::string name = NodeName(choice->node);
    decision.setNodeId(name);
    decision.setRpcAddress(state_.rpc_addresses[name]);
    decision.setPrefixBlocks(choice->prefix_blocks);
    decision.setScore(choice->cost);
    decision.setPartialTokens(choice->partial_tokens);
    return kj::READY_NOW;
  }

  kj::Promise<void> resolveNodes(ResolveNodesContext call) override {
    const auto ids = call.getParams().getNodeIds();
    std::vector<std::pair<std::string, NodeRole>> found;
    for (const auto id : ids) {
      const std::string name = id.cStr();
      const auto address = state_.rpc_addresses.find(name);
      if (address == state_.rpc_addresses.end()) continue;
      if (const std::optional<NodeRole> role = state_.coordinator->LiveRole(name))
        found.emplace_back(name, *role);
    }
    auto nodes = call.getResults().initNodes(static_cast<unsigned>(found.size()));
    for (unsigned i = 0; i < found.size(); ++i) {
      nodes[i].setNodeId(found[i].first);
      nodes[i].setRole(found[i].second == NodeRole::kStore ? schema::NodeRole::STORE
                                                           : schema::NodeRole::WORKER);
      nodes[i].setRpcAddress(state_.rpc_addresses[found[i].first]);
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> stats(StatsContext call) override {
    const CoordinatorStats s = state_.coordinator->Stats();
    auto out = call.getResults().initStats();
    out.setNodes(static_cast<uint32_t>(s.membership.live_nodes));
    // A tenant sees the cluster's size, never what the index holds: that depends on what
    // other tenants cached.
    if (!node_) return kj::READY_NOW;
    out.setClusterCounts(true);
    out.setIndexBlocks(s.index.blocks);
    out.setIndexBytes(s.index.memory_bytes);
    out.setLookups(state_.metrics->lookups());
    out.setSequenceGaps(s.membership.sequence_gaps);
    out.setResyncs(s.membership.resyncs);
    out.setLeaseExpiries(s.membership.lease_expiries);
    return kj::READY_NOW;
  }

 private:
  static constexpr ScopeId kNoScope = UINT16_MAX;

  void RequireNode() const {
    if (!node_) {
      ThrowStatus(PermissionDeniedError(
          "nodes register and publish with a node credential (the nodes: section of "
          "auth.token_file); this session holds a tenant token"));
    }
  }

  ScopeId Scope(uint64_t salt_scope) {
    Result<ScopeId> id = state_.scopes.Intern(salt_scope);
    ThrowIfError(id.status());
    return *id;
  }

  std::string NodeName(NodeId node) const { return state_.coordinator->NodeName(node); }

  KvEvent ToEvent(schema::KvEvent::Reader e) {
    KvEvent out;
    switch (e.which()) {
      case schema::KvEvent::STORED: {
        const auto s = e.getStored();
        out.kind = KvEvent::Kind::kStored;
        out.scope = Scope(s.getSaltScope());
        if (s.getHasParent()) out.parent = ToKey(s.getParentKey());
        out.keys = ToKeys(s.getKeys());
        out.tier = ToTier(s.getTier());
        out.pool = ToPool(s.getPoolId());
        out.retention.assign(out.keys.size(),
                             ToRetention(s.getPriority(), s.getRetentionExpiryMs()));
        out.tokens = ToTokens(s.getTokens());
        break;
      }
      case schema::KvEvent::REMOVED:
        out.kind = KvEvent::Kind::kRemoved;
        out.keys = ToKeys(e.getRemoved().getKeys());
        out.tier = ToTier(e.getRemoved().getTier());
        out.pool = ToPool(e.getRemoved().getPoolId());
        break;
      case schema::KvEvent::TIER_CHANGED: {
        const auto t = e.getTierChanged();
        out.kind = KvEvent::Kind::kTierChanged;
        out.keys = ToKeys(t.getKeys());
        out.tier = ToTier(t.getFromTier());
        out.to_tier = ToTier(t.getToTier());
        out.pool = ToPool(t.getFromPoolId());
        out.to_pool = ToPool(t.getToPoolId());
        break;
      }
      case schema::KvEvent::CLEARED: out.kind = KvEvent::Kind::kCleared; break;
      default: ThrowStatus(InvalidArgumentError("unknown KV event kind"));
    }
    return out;
  }

  uint64_t LeaseTtlMs() const {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(state_.coordinator->lease_ttl())
            .count());
  }

  CoordinatorState& state_;
  const uint64_t salt_scope_;
  const bool node_;
  const KeySalt salt_;
  const ConnectionId connection_;
  LookupAnswerWriter answers_;
};

}  // namespace

kj::Own<capnp::Capability::Server> MakeCoordinatorService(CoordinatorState& state,
                                                          CoordinatorSession session) {
  return kj::heap<CoordinatorServer>(state, session);
}

}  // namespace kvtier::coordinator
