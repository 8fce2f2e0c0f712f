#include "services/coordinator/rpc/node_agent.h"

#include <atomic>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "common/thread_name.h"

namespace kvtier::coordinator {

class NodeAgent::Impl {
 public:
  explicit Impl(NodeAgentOptions options) : options_(std::move(options)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Impl() { (void)Stop(); }

  void Enqueue(std::vector<NodeEvent> events) {
    MutexLock lock(mu_);
    queue_.insert(queue_.end(), std::make_move_iterator(events.begin()),
                  std::make_move_iterator(events.end()));
  }

  bool registered() const { return ready_; }

  Status Stop() {
    if (stopped_.exchange(true)) return Status::Ok();
    {
      MutexLock lock(mu_);
      stopping_ = true;
    }
    wake_.NotifyAll();
    if (thread_.joinable()) thread_.join();
    Status status = Status::Ok();
    if (link_ != nullptr && ready_)
      status = link_->Leave(lease_id_).WithContext("leave the coordinator");
    ready_ = false;
    return status;
  }

 private:
  void Run() {
    NameThisThread("kvt-agent");
    MutexLock lock(mu_);
    while (!stopping_) {
      lock.Unlock();
      Tick();
      if (options_.on_tick) options_.on_tick();
      lock.Lock();
      wake_.WaitFor(lock, options_.tick, [this]() KVTIER_REQUIRES(mu_) { return stopping_; });
    }
  }

  void Tick() {
    if (link_ == nullptr && !Connect().ok()) return;
    if (ready_)
      Check(link_->Heartbeat(lease_id_, options_.active_blocks ? options_.active_blocks() : 0));
    if (link_ == nullptr) return;  // lost: connect at the next tick
    if (!ready_) {
      if (Status s = Register(); !s.ok()) {
        Complain("register: " + s.ToString());
        Check(s);
        return;
      }
    }
    std::vector<NodeEvent> events;
    {
      MutexLock lock(mu_);
      events.swap(queue_);
    }
    if (events.empty()) return;
    Result<EventVerdict> verdict = link_->Publish(next_sequence_, events);
    next_sequence_ += WireEventCount(events);  // spent either way: a gap makes a snapshot
    Check(verdict.status());
    if (verdict.ok() && *verdict == EventVerdict::kSnapshotRequired) ready_ = false;
  }

  // A failed call means registering again; a lost connection also connecting again.
  void Check(const Status& status) {
    if (status.ok()) return;
    ready_ = false;
    if (status.code() == StatusCode::kUnavailable || status.code() == StatusCode::kDeadlineExceeded)
      link_.reset();
  }

  Status Connect() {
    Result<std::unique_ptr<NodeLink>> link = NodeLink::Connect(options_.link);
    if (!link.ok()) {
      Complain("coordinator " + options_.link.connection.address + ": " + link.status().ToString());
      return link.status();
    }
    link_ = std::move(link).value();
    return Status::Ok();
  }

  Status Register() {
    KVTIER_ASSIGN_OR_RETURN(LinkRegistration registration, link_->Register());
    lease_id_ = registration.lease_id;
    if (registration.snapshot_required) {
      {
        MutexLock lock(mu_);
        queue_.clear();
      }
      KVTIER_ASSIGN_OR_RETURN(std::vector<NodeBlock> blocks, options_.holdings());
      KVTIER_RETURN_IF_ERROR(link_->PublishSnapshot(next_sequence_, blocks));
    }
    ready_ = true;
    complained_ = false;
    spdlog::info("{}: registered with the coordinator at {}", options_.link.node_id,
                 options_.link.connection.address);
    return Status::Ok();
  }

  void Complain(const std::string& what) {
    if (!complained_) {
      spdlog::warn("{}: {} (retrying every {} ms)", options_.link.node_id, what,
                   options_.tick.count());
    }
    complained_ = true;
  }

  NodeAgentOptions options_;
  // The agent thread's (Stop reads them after joining it).
  std::unique_ptr<NodeLink> link_;
  uint64_t lease_id_ = 0;
  uint64_t next_sequence_ = 1;
  bool complained_ = false;
  std::atomic<bool> ready_{false};
  std::atomic<bool> stopped_{false};
  Mutex mu_;  // a leaf: Enqueue may run under a store's locks
  CondVar wake_;
  bool stopping_ KVTIER_GUARDED_BY(mu_) = false;
  std::vector<NodeEvent> queue_ KVTIER_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts after everything above exists
};

std::unique_ptr<NodeAgent> NodeAgent::Start(NodeAgentOptions options) {
  return std::unique_ptr<NodeAgent>(new NodeAgent(std::make_unique<Impl>(std::move(options))));
}

NodeAgent::NodeAgent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NodeAgent::~NodeAgent() = default;
void NodeAgent::Enqueue(std::vector<NodeEvent> events) { impl_->Enqueue(std::move(events)); }
bool NodeAgent::registered() const { return impl_->registered(); }
Status NodeAgent::Stop() { return impl_->Stop(); }

}  // namespace kvtier::coordinator
