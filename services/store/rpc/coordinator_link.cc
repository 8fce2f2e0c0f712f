#include "services/store/rpc/coordinator_link.h"

// See services/client/rpc/client_calls.cc: GCC 12 misreads kj::ExceptionOr<Result<T>>.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "services/rpc/rpc_client_impl.h"
#include "services/rpc/schema_convert.h"

namespace kvtier::store {
namespace {

namespace schema = rpc::schema;

schema::Tier ToWire(storage::TierKind tier) {
  return tier == storage::TierKind::kHost ? schema::Tier::HOST : schema::Tier::DISK;
}

void SetStored(const storage::BlockHeader& h, storage::TierKind tier, schema::StoredEvent::Builder out) {
  out.setHasParent(!h.first_in_chain);
  if (!h.first_in_chain) rpc::FromKey(h.parent, out.initParentKey());
  rpc::FromKey(h.key, out.initKeys(1)[0]);
  out.setTier(ToWire(tier));
  out.setPriority(h.priority);
  out.setRetentionExpiryMs(h.retention_left_ms);
  out.setSaltScope(h.salt_scope);
}

void SetEvent(const storage::StoreEvent& e, schema::KvEvent::Builder out) {
  switch (e.kind) {
    case storage::StoreEvent::Kind::kStored:
      SetStored(e.header, e.tier, out.initStored());
      break;
    case storage::StoreEvent::Kind::kRemoved: {
      auto removed = out.initRemoved();
      rpc::FromKey(e.header.key, removed.initKeys(1)[0]);
      removed.setTier(ToWire(e.tier));
      break;
    }
    case storage::StoreEvent::Kind::kTierChanged: {
      auto changed = out.initTierChanged();
      rpc::FromKey(e.header.key, changed.initKeys(1)[0]);
      changed.setFromTier(ToWire(e.tier));
      changed.setToTier(ToWire(e.to_tier));
      break;
    }
  }
}

}  // namespace

class CoordinatorLink::Impl {
 public:
  Impl(std::unique_ptr<rpc::RpcClient> rpc, CoordinatorLinkOptions options)
      : rpc_(std::move(rpc)), options_(std::move(options)) {}
  ~Impl() {
    rpc_->impl().RunOnLoop([this] { coordinator_ = nullptr; });
  }

  template <typename T, typename Call>
  T Run(Call call) {
    return rpc_->impl()
        .Call<T>([this, call = std::move(call)](schema::Session::Client& session) mutable {
          if (!coordinator_) coordinator_ = kj::heap(session.coordinatorRequest().send().getCoordinator());
          return call(*coordinator_);
        })
        .get();
  }

  const CoordinatorLinkOptions& options() const { return options_; }

 private:
  std::unique_ptr<rpc::RpcClient> rpc_;
  const CoordinatorLinkOptions options_;
  kj::Own<schema::Coordinator::Client> coordinator_;  // the loop thread's
};

Result<std::unique_ptr<CoordinatorLink>> CoordinatorLink::Connect(CoordinatorLinkOptions options) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<rpc::RpcClient> rpc, rpc::RpcClient::Connect(options.connection));
  return std::unique_ptr<CoordinatorLink>(new CoordinatorLink(std::make_unique<Impl>(std::move(rpc), std::move(options))));
}

CoordinatorLink::CoordinatorLink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CoordinatorLink::~CoordinatorLink() = default;

Result<LinkRegistration> CoordinatorLink::Register() {
  const CoordinatorLinkOptions& o = impl_->options();
  return impl_->Run<Result<LinkRegistration>>([&o](schema::Coordinator::Client& c) {
    auto request = c.registerRequest();
    auto node = request.initNode();
    node.setNodeId(o.node_id);
    node.setRole(schema::NodeRole::STORE);
    node.setRpcAddress(o.rpc_address);
    node.setIncarnation(o.incarnation);
    return request.send().then([](auto r) -> Result<LinkRegistration> {
      return LinkRegistration{r.getLease().getLeaseId(), std::chrono::milliseconds(r.getLease().getTtlMs()),
                              r.getSnapshotRequired()};
    });
  });
}

Status CoordinatorLink::Heartbeat(uint64_t lease_id) {
  const std::string node = impl_->options().node_id;
  return impl_->Run<Status>([node, lease_id](schema::Coordinator::Client& c) {
    auto request = c.heartbeatRequest();
    request.setNodeId(node);
    request.setLeaseId(lease_id);
    return request.send().then([](auto) { return Status::Ok(); });
  });
}

Result<EventVerdict> CoordinatorLink::Publish(uint64_t first_sequence, std::span<const storage::StoreEvent> events) {
  const CoordinatorLinkOptions& o = impl_->options();
  return impl_->Run<Result<EventVerdict>>([&o, first_sequence, events](schema::Coordinator::Client& c) {
    auto request = c.publishEventsRequest();
    auto batch = request.initBatch();
    batch.setNodeId(o.node_id);
    batch.setIncarnation(o.incarnation);
    batch.setFirstSequence(first_sequence);
    auto list = batch.initEvents(static_cast<unsigned>(events.size()));
    for (unsigned i = 0; i < events.size(); ++i) SetEvent(events[i], list[i]);
    return request.send().then([](auto r) -> Result<EventVerdict> {
      switch (r.getStatus()) {
        case schema::EventAckStatus::APPLIED: return EventVerdict::kApplied;
        case schema::EventAckStatus::DUPLICATE: return EventVerdict::kDuplicate;
        default: return EventVerdict::kSnapshotRequired;
      }
    });
  });
}

Status CoordinatorLink::PublishSnapshot(uint64_t next_sequence,
                                        std::span<const std::pair<storage::TierKind, storage::BlockHeader>> holdings) {
  const CoordinatorLinkOptions& o = impl_->options();
  size_t at = 0;
  do {
    const auto chunk = holdings.subspan(at, std::min<size_t>(o.snapshot_chunk_blocks, holdings.size() - at));
    at += chunk.size();
    const bool last = at == holdings.size();
    KVTIER_RETURN_IF_ERROR(impl_->Run<Status>([&o, next_sequence, chunk, last](schema::Coordinator::Client& c) {
      auto request = c.publishSnapshotRequest();
      auto snapshot = request.initSnapshot();
      snapshot.setNodeId(o.node_id);
      snapshot.setIncarnation(o.incarnation);
      snapshot.setNextSequence(next_sequence);
      snapshot.setLast(last);
      auto blocks = snapshot.initBlocks(static_cast<unsigned>(chunk.size()));
      for (unsigned i = 0; i < chunk.size(); ++i) {
        const auto& [tier, h] = chunk[i];
        rpc::FromKey(h.key, blocks[i].initKey());
        blocks[i].setHasParent(!h.first_in_chain);
        if (!h.first_in_chain) rpc::FromKey(h.parent, blocks[i].initParentKey());
        auto location = blocks[i].initLocation();
        location.setNodeId(o.node_id);
        location.setTier(ToWire(tier));
        blocks[i].setPriority(h.priority);
        blocks[i].setRetentionExpiryMs(h.retention_left_ms);
        blocks[i].setSaltScope(h.salt_scope);
      }
      return request.send().then([](auto) { return Status::Ok(); });
    }));
  } while (at < holdings.size());
  return Status::Ok();
}

Status CoordinatorLink::Leave(uint64_t lease_id) {
  const std::string node = impl_->options().node_id;
  return impl_->Run<Status>([node, lease_id](schema::Coordinator::Client& c) {
    auto request = c.leaveRequest();
    request.setNodeId(node);
    request.setLeaseId(lease_id);
    return request.send().then([](auto) { return Status::Ok(); });
  });
}

}  // namespace kvtier::store
