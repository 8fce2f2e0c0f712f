// RpcClient::Impl: the connection's event-loop thread, for the RPC layers built on an
// RpcClient (services/client/rpc). Generated types appear here, so only RPC layers
// include this header.
//
// Start() hands a call to the loop thread and returns a std::future at once: the call
// runs there with the tenant Session, KJ exceptions become Status
// (services/rpc/status_mapping.h), each attempt is bounded by the client's timeout, and
// a failed attempt is made again, after a doubling backoff, while `retry` accepts its
// Status. RunOnLoop() runs a function there and waits for it (for state that must be made
// and destroyed on the loop thread, such as capabilities obtained from the Session).
//
// Thread safety: every method from any thread. A future still outstanding when the client
// is destroyed reports kCancelled.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/function.h>

#include "services/rpc/buffered_message_stream.h"
#include "services/rpc/rpc_client.h"
#include "services/rpc/schema/kvtier.capnp.h"
#include "services/rpc/status_mapping.h"
#include "services/rpc/tls.h"

namespace kvtier::rpc {

// When a failed attempt is made again: up to `max_attempts` in all, while `should_retry`
// accepts the attempt's Status, after `backoff`, doubling each time.
struct RetryPolicy {
  int max_attempts = 1;
  std::chrono::milliseconds backoff{50};
  std::function<bool(const Status&)> should_retry;
};

class RpcClient::Impl {
 public:
  explicit Impl(RpcClientOptions options);
  ~Impl();

  // Starts the loop thread, connects and authenticates.
  Status Start();
  Result<PingReply> Ping(const std::string& payload);
  Result<ServerVersion> Version();

  const std::string& tenant() const { return tenant_; }
  const ServerVersion& server() const { return server_; }
  bool connected() const { return connected_.load(std::memory_order_acquire); }

  // REQUIRES: T is a Result<...> or Status.
  template <typename T>
  std::future<T> Call(kj::Function<kj::Promise<T>(schema::Session::Client&)> call,
                      RetryPolicy retry = {}) {
    auto done = std::make_shared<Completion<T>>();
    std::future<T> future = done->promise.get_future();
    auto attempt = std::make_shared<Attempt<T>>(Attempt<T>{kj::mv(call), std::move(retry), 1});
    executor_->executeSync([&] {
      Run(attempt)
          .then([done](T&& result) { done->Set(std::move(result)); })
          .detach([done](kj::Exception&& e) { done->Set(T(ExceptionToStatus(e))); });
    });
    return future;
  }

  void RunOnLoop(kj::Function<void()> function) { executor_->executeSync(kj::mv(function)); }

 private:
  // Fulfils the caller's future exactly once: with kCancelled when the loop drops the call
  // unfinished (the client is being destroyed).
  template <typename T>
  struct Completion {
    std::promise<T> promise;
    bool set = false;
    void Set(T value) {
      set = true;
      promise.set_value(std::move(value));
    }
    ~Completion() {
      if (!set)
        promise.set_value(T(CancelledError("the connection was closed before the call finished")));
    }
  };

  template <typename T>
  struct Attempt {
    kj::Function<kj::Promise<T>(schema::Session::Client&)> call;
    RetryPolicy retry;
    int number;
  };

  template <typename T>
  kj::Promise<T> Run(std::shared_ptr<Attempt<T>> attempt) {
    return Guard<T>(attempt->call(*session_)).then([this, attempt](T&& result) -> kj::Promise<T> {
      const Status& status = StatusOf(result);
      if (status.ok() || attempt->number >= attempt->retry.max_attempts ||
          !attempt->retry.should_retry || !attempt->retry.should_retry(status)) {
        return kj::mv(result);
      }
      const auto delay = attempt->retry.backoff * (1 << (attempt->number - 1));
      ++attempt->number;
      return io_->provider->getTimer()
          .afterDelay(delay.count() * kj::MILLISECONDS)
          .then([this, attempt] { return Run(attempt); });
    });
  }

  static const Status& StatusOf(const Status& status) { return status; }
  template <typename V>
  static const Status& StatusOf(const Result<V>& result) {
    return result.status();
  }

  void Loop(std::promise<Status>& ready);
  kj::Promise<Status> ConnectAndAuthenticate();

  // Maps exceptions to Status and enforces the call timeout.
  template <typename T>
  kj::Promise<T> Guard(kj::Promise<T> call) {
    const auto timeout = options_.timeout;
    return call.catch_([](kj::Exception&& e) -> T { return T(ExceptionToStatus(e)); })
        .exclusiveJoin(io_->provider->getTimer()
                           .afterDelay(timeout.count() * kj::MILLISECONDS)
                           .then([timeout]() -> T {
                             return T(DeadlineExceededError(
                                 "no answer within " + std::to_string(timeout.count()) + " ms"));
                           }));
  }

  RpcClientOptions options_;
  std::unique_ptr<TlsClient> tls_;
  std::thread thread_;
  const kj::Executor* executor_ = nullptr;
  std::string tenant_;
  ServerVersion server_;
  std::atomic<bool> connected_{false};
  // Owned by the client thread's event loop.
  kj::AsyncIoContext* io_ = nullptr;
  kj::Own<kj::PromiseFulfiller<void>> stop_;
  kj::Own<kj::AsyncIoStream> stream_;
  kj::Own<BufferedMessageStream> messages_;
  kj::Own<capnp::TwoPartyVatNetwork> network_;
  kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc_;
  kj::Own<schema::Session::Client> session_;
  kj::Maybe<kj::Promise<void>> watch_disconnect_;  // clears connected_
};

}  // namespace kvtier::rpc
