#include "services/rpc/gcc_kj_workaround.h"  // first: before any KJ header
#include "services/coordinator/rpc/node_link.h"

#include "services/rpc/rpc_client_impl.h"
#include "services/rpc/schema_convert.h"

namespace kvtier::coordinator {
namespace {

namespace schema = rpc::schema;

schema::Tier ToWire(Tier tier) {
  switch (tier) {
    case Tier::kGpu: return schema::Tier::GPU;
    case Tier::kHost: return schema::Tier::HOST;
    case Tier::kDisk: return schema::Tier::DISK;
  }
  return schema::Tier::DISK;
}

// The keys of a run of events, into a list the size of the run.
void SetKeys(std::span<const NodeEvent> run, capnp::List<rpc::schema::BlockKey>::Builder keys) {
  for (unsigned i = 0; i < run.size(); ++i) rpc::FromKey(run[i].key, keys[i]);
}

// One wire event for a run of events that join the first (JoinsWireEvent).
void SetEvent(std::span<const NodeEvent> run, schema::KvEvent::Builder out) {
  const NodeEvent& e = run.front();
  const auto blocks = static_cast<unsigned>(run.size());
  switch (e.kind) {
    case NodeEvent::Kind::kStored: {
      auto stored = out.initStored();
      stored.setHasParent(!e.first);
      if (!e.first) rpc::FromKey(e.parent, stored.initParentKey());
      SetKeys(run, stored.initKeys(blocks));
      stored.setTier(ToWire(e.tier));
      stored.setPoolId(e.pool);
      stored.setPriority(e.priority);
      stored.setRetentionExpiryMs(e.retention_ms);
      stored.setSaltScope(e.salt_scope);
      if (!e.tokens.empty()) {
        auto tokens = stored.initTokens(static_cast<unsigned>(e.tokens.size() * run.size()));
        unsigned at = 0;
        for (const NodeEvent& block : run) {
          for (const uint32_t token : block.tokens) tokens.set(at++, token);
        }
      }
      break;
    }
    case NodeEvent::Kind::kRemoved: {
      auto removed = out.initRemoved();
      SetKeys(run, removed.initKeys(blocks));
      removed.setTier(ToWire(e.tier));
      removed.setPoolId(e.pool);
      break;
    }
    case NodeEvent::Kind::kTierChanged: {
      auto changed = out.initTierChanged();
      SetKeys(run, changed.initKeys(blocks));
      changed.setFromTier(ToWire(e.tier));
      changed.setToTier(ToWire(e.to_tier));
      changed.setFromPoolId(e.pool);
      changed.setToPoolId(e.pool);
      break;
    }
  }
}

// Where each wire event's run of `events` begins.
std::vector<size_t> RunStarts(std::span<const NodeEvent> events) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < events.size(); ++i) {
    if (i == 0 || !JoinsWireEvent(events[i - 1], events[i])) starts.push_back(i);
  }
  return starts;
}

void SetBlock(const NodeBlock& b, const std::string& node, schema::SnapshotBlock::Builder out) {
  rpc::FromKey(b.key, out.initKey());
  out.setHasParent(!b.first);
  if (!b.first) rpc::FromKey(b.parent, out.initParentKey());
  auto location = out.initLocation();
  location.setNodeId(node);
  location.setTier(ToWire(b.tier));
  location.setPoolId(b.pool);
  out.setPriority(b.priority);
  out.setRetentionExpiryMs(b.retention_ms);
  out.setSaltScope(b.salt_scope);
  if (!b.tokens.empty())
    rpc::FromTokens(b.tokens, out.initTokens(static_cast<unsigned>(b.tokens.size())));
}

}  // namespace

class NodeLink::Impl {
 public:
  Impl(std::unique_ptr<rpc::RpcClient> rpc, NodeLinkOptions options)
      : rpc_(std::move(rpc)), options_(std::move(options)) {}
  ~Impl() {
    rpc_->impl().RunOnLoop([this] { coordinator_ = nullptr; });
  }

  // Runs `call` with the Coordinator capability on the connection's loop and waits.
  template <typename T, typename Call>
  T Run(Call call) {
    return rpc_->impl()
        .Call<T>([this, call = std::move(call)](schema::Session::Client& session) mutable {
          if (!coordinator_)
            coordinator_ = kj::heap(session.coordinatorRequest().send().getCoordinator());
          return call(*coordinator_);
        })
        .get();
  }

  const NodeLinkOptions& options() const { return options_; }

 private:
  std::unique_ptr<rpc::RpcClient> rpc_;
  const NodeLinkOptions options_;
  kj::Own<schema::Coordinator::Client> coordinator_;  // the loop thread's
};

Result<std::unique_ptr<NodeLink>> NodeLink::Connect(NodeLinkOptions options) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<rpc::RpcClient> rpc,
                          rpc::RpcClient::Connect(options.connection));
  return std::unique_ptr<NodeLink>(
      new NodeLink(std::make_unique<Impl>(std::move(rpc), std::move(options))));
}

NodeLink::NodeLink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NodeLink::~NodeLink() = default;

Result<LinkRegistration> NodeLink::Register() {
  const NodeLinkOptions& o = impl_->options();
  return impl_->Run<Result<LinkRegistration>>([&o](schema::Coordinator::Client& c) {
    auto request = c.registerRequest();
    auto node = request.initNode();
    node.setNodeId(o.node_id);
    node.setRole(o.role == NodeRole::kStore ? schema::NodeRole::STORE : schema::NodeRole::WORKER);
    node.setRpcAddress(o.rpc_address);
    node.setIncarnation(o.incarnation);
    auto capacities = node.initCapacities(static_cast<unsigned>(o.pools.size()));
    for (size_t i = 0; i < o.pools.size(); ++i) {
      const NodePool& p = o.pools[i];
      auto c = capacities[static_cast<unsigned>(i)];
      c.setTier(ToWire(p.tier));
      c.setPoolId(p.pool);
      c.setCapacityBlocks(p.capacity_blocks);
      c.setCapacityBytes(p.capacity_bytes);
      if (p.layout) rpc::FromLayout(*p.layout, c.initLayout());
    }
    return request.send().then([](auto r) -> Result<LinkRegistration> {
      return LinkRegistration{r.getLease().getLeaseId(),
                              std::chrono::milliseconds(r.getLease().getTtlMs()),
                              r.getSnapshotRequired()};
    });
  });
}

Status NodeLink::Heartbeat(uint64_t lease_id, uint64_t active_blocks) {
  const std::string node = impl_->options().node_id;
  return impl_->Run<Status>([node, lease_id, active_blocks](schema::Coordinator::Client& c) {
    auto request = c.heartbeatRequest();
    request.setNodeId(node);
    request.setLeaseId(lease_id);
    request.setActiveBlocks(active_blocks);
    return request.send().then([](auto) { return Status::Ok(); });
  });
}

bool JoinsWireEvent(const NodeEvent& last, const NodeEvent& next) {
  if (last.kind != next.kind || last.tier != next.tier || last.pool != next.pool) return false;
  switch (next.kind) {
    case NodeEvent::Kind::kStored:
      return !next.first && next.parent == last.key && next.priority == last.priority &&
             next.retention_ms == last.retention_ms && next.salt_scope == last.salt_scope &&
             next.tokens.size() == last.tokens.size();
    case NodeEvent::Kind::kRemoved: return true;
    case NodeEvent::Kind::kTierChanged: return next.to_tier == last.to_tier;
  }
  return false;
}

size_t WireEventCount(std::span<const NodeEvent> events) {
  size_t count = 0;
  for (size_t i = 0; i < events.size(); ++i)
    count += i == 0 || !JoinsWireEvent(events[i - 1], events[i]);
  return count;
}

Result<EventVerdict> NodeLink::Publish(uint64_t first_sequence, std::span<const NodeEvent> events) {
  const NodeLinkOptions& o = impl_->options();
  return impl_->Run<Result<EventVerdict>>(
      [&o, first_sequence, events](schema::Coordinator::Client& c) {
        auto request = c.publishEventsRequest();
        auto batch = request.initBatch();
        batch.setNodeId(o.node_id);
        batch.setIncarnation(o.incarnation);
        batch.setFirstSequence(first_sequence);
        const std::vector<size_t> starts = RunStarts(events);
        auto list = batch.initEvents(static_cast<unsigned>(starts.size()));
        for (unsigned r = 0; r < starts.size(); ++r) {
          const size_t end = r + 1 < starts.size() ? starts[r + 1] : events.size();
          SetEvent(events.subspan(starts[r], end - starts[r]), list[r]);
        }
        return request.send().then([](auto r) -> Result<EventVerdict> {
          switch (r.getStatus()) {
            case schema::EventAckStatus::APPLIED: return EventVerdict::kApplied;
            case schema::EventAckStatus::DUPLICATE: return EventVerdict::kDuplicate;
            default: return EventVerdict::kSnapshotRequired;
          }
        });
      });
}

Status NodeLink::PublishSnapshot(uint64_t next_sequence, std::span<const NodeBlock> blocks) {
  const NodeLinkOptions& o = impl_->options();
  size_t at = 0;
  do {
    const auto chunk =
        blocks.subspan(at, std::min<size_t>(o.snapshot_chunk_blocks, blocks.size() - at));
    at += chunk.size();
    const bool last = at == blocks.size();
    KVTIER_RETURN_IF_ERROR(
        impl_->Run<Status>([&o, next_sequence, chunk, last](schema::Coordinator::Client& c) {
          auto request = c.publishSnapshotRequest();
          auto snapshot = request.initSnapshot();
          snapshot.setNodeId(o.node_id);
          snapshot.setIncarnation(o.incarnation);
          snapshot.setNextSequence(next_sequence);
          snapshot.setLast(last);
          auto list = snapshot.initBlocks(static_cast<unsigned>(chunk.size()));
          for (unsigned i = 0; i < chunk.size(); ++i) SetBlock(chunk[i], o.node_id, list[i]);
          return request.send().then([](auto) { return Status::Ok(); });
        }));
  } while (at < blocks.size());
  return Status::Ok();
}

Status NodeLink::Leave(uint64_t lease_id) {
  const std::string node = impl_->options().node_id;
  return impl_->Run<Status>([node, lease_id](schema::Coordinator::Client& c) {
    auto request = c.leaveRequest();
    request.setNodeId(node);
    request.setLeaseId(lease_id);
    return request.send().then([](auto) { return Status::Ok(); });
  });
}

}  // namespace kvtier::coordinator
