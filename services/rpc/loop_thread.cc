#include "services/rpc/loop_thread.h"

#include <future>
#include <thread>

#include <kj/async-io.h>
#include <spdlog/spdlog.h>

#include "common/thread_name.h"

namespace kvtier::rpc {

class LoopThread::Impl final : private kj::TaskSet::ErrorHandler {
 public:
  explicit Impl(LoopThreadOptions options) : options_(std::move(options)) {}

  ~Impl() {
    if (!thread_.joinable()) return;
    stop_->fulfill();
    thread_.join();
  }

  void Start() {
    std::promise<void> started;
    thread_ = std::thread([this, &started] { Run(started); });
    started.get_future().wait();
  }

  const kj::Executor& executor() const { return *executor_; }

 private:
  void Run(std::promise<void>& started) {
    NameThisThread(options_.name);
    kj::AsyncIoContext io = kj::setupAsyncIo();
    timer_ = &io.provider->getTimer();
    kj::TaskSet tasks(*this);
    if (options_.tick) tasks.add(TickLoop());
    auto stop = kj::newPromiseAndCrossThreadFulfiller<void>();
    stop_ = kj::mv(stop.fulfiller);
    executor_ = &kj::getCurrentThreadExecutor();
    started.set_value();
    stop.promise.wait(io.waitScope);
  }

  kj::Promise<void> TickLoop() {
    return timer_->afterDelay(options_.tick_interval.count() * kj::MILLISECONDS).then([this] {
      options_.tick();
      return TickLoop();
    });
  }

  void taskFailed(kj::Exception&& exception) override {
    spdlog::error("{}: a tick failed: {}", options_.name, exception.getDescription().cStr());
  }

  const LoopThreadOptions options_;
  std::thread thread_;
  // Set by the thread before Start returns; read-only after.
  kj::Timer* timer_ = nullptr;
  const kj::Executor* executor_ = nullptr;
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> stop_;
};

Result<std::unique_ptr<LoopThread>> LoopThread::Create(LoopThreadOptions options) {
  if (options.tick && options.tick_interval.count() <= 0) {
    return InvalidArgumentError("LoopThread " + options.name +
                                ": a tick needs a positive tick_interval, not " +
                                std::to_string(options.tick_interval.count()) + " ms");
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  impl->Start();
  return std::unique_ptr<LoopThread>(new LoopThread(std::move(impl)));
}

LoopThread::LoopThread(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LoopThread::~LoopThread() = default;
const kj::Executor& LoopThread::executor() const { return impl_->executor(); }

}  // namespace kvtier::rpc
