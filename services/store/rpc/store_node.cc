#include "services/store/rpc/store_node.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/thread_annotations.h"
#include "services/rpc/rpc_server.h"
#include "services/rpc/session_service.h"
#include "services/store/rpc/coordinator_link.h"
#include "services/store/rpc/store_service.h"
#include "services/store/store_tiers.h"
#include "storage/store_metrics.h"

namespace kvtier::store {

class StoreNode::Impl {
 public:
  explicit Impl(StoreNodeOptions options) : options_(std::move(options)) {}
  ~Impl() { (void)Drain(); }

  Status Start() {
    if (options_.registry == nullptr || options_.node_id.empty()) {
      return InvalidArgumentError("StoreNodeOptions: registry and node_id are required");
    }
    KVTIER_ASSIGN_OR_RETURN(storage::TieredStoreOptions tiers, TieredStoreOptionsFrom(options_.config));
    tiers.on_event = [this](const storage::StoreEvent& event) {
      std::lock_guard lock(mu_);
      events_.push_back(event);
    };
    KVTIER_ASSIGN_OR_RETURN(store_, storage::TieredStore::Create(std::move(tiers)));
    KVTIER_ASSIGN_OR_RETURN(metrics_, storage::StoreMetrics::Create(*options_.registry));
    metrics_->Update(store_->Stats());

    session_.identity = {options_.node_id, {"store"}};
    session_.tokens = &options_.tokens;
    session_.clock = &SystemClock::Instance();
    session_.store = [this](const auth::Tenant& tenant) { return MakeBlockStoreService(*store_, tenant); };
    rpc::RpcServerOptions server;
    server.listen = {options_.config.store.listen};
    server.max_message_bytes = options_.config.coordinator.max_message_bytes;
    server.tls_cert_file = options_.config.tls.cert_file;
    server.tls_key_file = options_.config.tls.key_file;
    KVTIER_ASSIGN_OR_RETURN(server_, rpc::RpcServer::Create(std::move(server),
                                                            [this] { return rpc::MakeBootstrap(session_); }));
    incarnation_ = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
    agent_ = std::thread([this] { RunAgent(); });
    return Status::Ok();
  }

  const std::vector<std::string>& endpoints() const { return server_->endpoints(); }
  bool registered() const { return ready_; }

  Status Drain() {
    if (drained_.exchange(true)) return Status::Ok();
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (agent_.joinable()) agent_.join();
    Status status = Status::Ok();
    if (link_ != nullptr && ready_) status = link_->Leave(lease_id_).WithContext("leave the coordinator");
    ready_ = false;
    if (server_) server_->Shutdown();
    if (store_) {
      if (Status flushed = store_->Flush(); !flushed.ok() && status.ok()) status = flushed.WithContext("flush");
    }
    return status;
  }

 private:
  // The coordinator thread: (re)register, renew, publish, every tick until stopped.
  void RunAgent() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      lock.unlock();
      Tick();
      metrics_->Update(store_->Stats());
      lock.lock();
      wake_.wait_for(lock, options_.tick, [this] { return stopping_; });
    }
  }

  void Tick() {
    if (link_ == nullptr && !Connect().ok()) return;
    if (ready_) Check(link_->Heartbeat(lease_id_));
    if (link_ == nullptr) return;  // lost: connect at the next tick
    if (!ready_) {
      if (Status s = Register(); !s.ok()) {
        Complain("register: " + s.ToString());
        Check(s);
        return;
      }
    }
    std::vector<storage::StoreEvent> events;
    {
      std::lock_guard lock(mu_);
      events.swap(events_);
    }
    if (events.empty()) return;
    Result<EventVerdict> verdict = link_->Publish(next_sequence_, events);
    next_sequence_ += events.size();  // spent either way: a gap makes a snapshot
    Check(verdict.status());
    if (verdict.ok() && *verdict == EventVerdict::kSnapshotRequired) ready_ = false;
  }

  // A failed call means registering again; a lost connection (the coordinator restarted
  // or moved) also means connecting again.
  void Check(const Status& status) {
    if (status.ok()) return;
    ready_ = false;
    if (status.code() == StatusCode::kUnavailable || status.code() == StatusCode::kDeadlineExceeded) link_.reset();
  }

  Status Connect() {
    rpc::RpcClientOptions connection;
    connection.address = options_.config.store.coordinator;
    connection.token = options_.coordinator_token;
    connection.tls_ca_file = options_.config.tls.ca_file;
    const std::string& advertise = options_.config.store.advertise;
    Result<std::unique_ptr<CoordinatorLink>> link = CoordinatorLink::Connect(
        {connection, options_.node_id, advertise.empty() ? endpoints().front() : advertise, incarnation_});
    if (!link.ok()) {
      Complain("coordinator " + connection.address + ": " + link.status().ToString());
      return link.status();
    }
    link_ = std::move(link).value();
    return Status::Ok();
  }

  // Registers; when asked, sends everything the tiers hold. Events queued before the
  // holdings were read are dropped: the snapshot reflects them.
  Status Register() {
    KVTIER_ASSIGN_OR_RETURN(LinkRegistration registration, link_->Register());
    lease_id_ = registration.lease_id;
    if (registration.snapshot_required) {
      {
        std::lock_guard lock(mu_);
        events_.clear();
      }
      KVTIER_RETURN_IF_ERROR(link_->PublishSnapshot(next_sequence_, store_->Holdings()));
    }
    ready_ = true;
    complained_ = false;
    spdlog::info("{}: registered with the coordinator at {}", options_.node_id, options_.config.store.coordinator);
    return Status::Ok();
  }

  void Complain(const std::string& what) {
    if (!complained_) spdlog::warn("{}: {} (retrying every {} ms)", options_.node_id, what, options_.tick.count());
    complained_ = true;
  }

  StoreNodeOptions options_;
  std::unique_ptr<storage::TieredStore> store_;
  std::unique_ptr<storage::StoreMetrics> metrics_;
  rpc::SessionContext session_;
  std::unique_ptr<rpc::RpcServer> server_;
  uint64_t incarnation_ = 0;
  // The agent thread's (Drain reads them after joining it).
  std::unique_ptr<CoordinatorLink> link_;
  uint64_t lease_id_ = 0;
  uint64_t next_sequence_ = 1;
  bool complained_ = false;
  std::atomic<bool> ready_{false};
  std::atomic<bool> drained_{false};
  std::thread agent_;
  std::mutex mu_;  // a leaf: taken under the store's locks by on_event
  std::condition_variable wake_;
  bool stopping_ KVTIER_GUARDED_BY(mu_) = false;
  std::vector<storage::StoreEvent> events_ KVTIER_GUARDED_BY(mu_);
};

Result<std::unique_ptr<StoreNode>> StoreNode::Create(StoreNodeOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  KVTIER_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<StoreNode>(new StoreNode(std::move(impl)));
}

StoreNode::StoreNode(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StoreNode::~StoreNode() = default;
const std::vector<std::string>& StoreNode::endpoints() const { return impl_->endpoints(); }
bool StoreNode::registered() const { return impl_->registered(); }
Status StoreNode::Drain() { return impl_->Drain(); }

}  // namespace kvtier::store
