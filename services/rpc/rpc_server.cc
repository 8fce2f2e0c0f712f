#include "services/rpc/rpc_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <future>
#include <thread>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <spdlog/spdlog.h>

#include "common/thread_name.h"
#include "services/rpc/buffered_message_stream.h"
#include "services/rpc/status_mapping.h"
#include "services/rpc/tls.h"

namespace kvtier::rpc {
namespace {

constexpr auto kTlsHandshakeTimeout = 10 * kj::SECONDS;

// One client connection: the stream, the two-party network over it and the RPC system
// serving the connection's bootstrap capability. Destroying it closes the connection.
struct Connection {
  Connection(kj::Own<kj::AsyncIoStream> s, capnp::Capability::Client bootstrap, capnp::ReaderOptions options,
             std::function<void()> on_message)
      : stream(kj::mv(s)),
        messages(*stream, {.on_message = std::move(on_message)}),
        network(messages, capnp::rpc::twoparty::Side::SERVER, options),
        rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}
  kj::Own<kj::AsyncIoStream> stream;
  BufferedMessageStream messages;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
};

// A Unix socket path left behind by a process that died is removed; one that a live
// server still answers on is "in use".
Status PrepareUnixSocketPath(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return Status::Ok();
  if (!S_ISSOCK(st.st_mode)) {
    return UnavailableError("cannot listen on unix:" + path + ": the path exists and is not a socket");
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgumentError("unix socket path is longer than " + std::to_string(sizeof(addr.sun_path) - 1) +
                                " bytes: " + path);
  }
  path.copy(addr.sun_path, path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  if (live) return UnavailableError("cannot listen on unix:" + path + ": another server is listening there");
  unlink(path.c_str());
  return Status::Ok();
}

}  // namespace

class RpcServer::Impl final : private kj::TaskSet::ErrorHandler {
 public:
  Impl(RpcServerOptions options, BootstrapFactory factory)
      : options_(std::move(options)), factory_(std::move(factory)) {}
  ~Impl() { Shutdown(); }

  Status Start() {
    std::promise<Status> started;
    std::future<Status> result = started.get_future();
    thread_ = std::thread([this, &started] { Run(started); });
    Status status = result.get();
    if (!status.ok()) thread_.join();
    return status;
  }

  void Shutdown() {
    if (!thread_.joinable()) return;
    executor_->executeSync([this] {
      stopping_ = true;
      stop_->fulfill();
    });
    thread_.join();
    for (const std::string& path : unix_paths_) unlink(path.c_str());
  }

  const std::vector<std::string>& endpoints() const { return endpoints_; }
  bool tls() const { return !options_.tls_cert_file.empty(); }

 private:
  void Run(std::promise<Status>& started) {
    NameThisThread(options_.thread_name);
    kj::AsyncIoContext io = kj::setupAsyncIo();
    timer_ = &io.provider->getTimer();
    // Destroyed in reverse order: connections and accept loops (tasks) before listeners.
    std::vector<kj::Own<kj::ConnectionReceiver>> receivers;
    kj::TaskSet tasks(*this);
    tasks_ = &tasks;
    Status status = Listen(io, receivers);
    if (!status.ok()) {
      started.set_value(std::move(status));
      return;
    }
    for (auto& receiver : receivers) tasks.add(AcceptLoop(*receiver));
    if (options_.tick) tasks.add(TickLoop());
    auto stop = kj::newPromiseAndFulfiller<void>();
    stop_ = kj::mv(stop.fulfiller);
    executor_ = &kj::getCurrentThreadExecutor();
    started.set_value(Status::Ok());
    if (options_.busy_poll.count() > 0) {
      ServeBusyPolling(kj::mv(stop.promise), io.waitScope);
    } else {
      stop.promise.wait(io.waitScope);
    }
    wake_on_message_ = nullptr;
    tasks_ = nullptr;
  }

  // Sleeps until a message arrives, then polls without sleeping until none has arrived for
  // options_.busy_poll; over and over until Shutdown().
  void ServeBusyPolling(kj::Promise<void> stop, kj::WaitScope& wait_scope) {
    using Clock = std::chrono::steady_clock;
    kj::ForkedPromise<void> stopped = stop.fork();
    while (!stopping_) {
      auto woken = kj::newPromiseAndFulfiller<void>();
      wake_on_message_ = kj::mv(woken.fulfiller);
      woken.promise.exclusiveJoin(stopped.addBranch()).wait(wait_scope);
      uint64_t seen = messages_read_;
      Clock::time_point last_message = Clock::now();
      while (!stopping_) {
        wait_scope.poll();
        if (messages_read_ != seen) {
          seen = messages_read_;
          last_message = Clock::now();
        } else if (Clock::now() - last_message >= options_.busy_poll) {
          break;
        }
      }
    }
  }

  void OnMessage() {
    ++messages_read_;
    if (wake_on_message_) {
      wake_on_message_->fulfill();
      wake_on_message_ = nullptr;
    }
  }

  Status Listen(kj::AsyncIoContext& io, std::vector<kj::Own<kj::ConnectionReceiver>>& receivers) {
    if (!options_.tls_cert_file.empty() || !options_.tls_key_file.empty()) {
      KVTIER_ASSIGN_OR_RETURN(tls_, TlsServer::Create(options_.tls_cert_file, options_.tls_key_file));
    }
    if (options_.listen.empty()) return InvalidArgumentError("RpcServer needs at least one listen address");
    for (const std::string& address : options_.listen) {
      const bool is_unix = address.starts_with("unix:");
      if (is_unix) KVTIER_RETURN_IF_ERROR(PrepareUnixSocketPath(address.substr(5)));
      kj::Own<kj::ConnectionReceiver> receiver;
      KJ_IF_MAYBE(exception, kj::runCatchingExceptions([&] {
        receiver = io.provider->getNetwork().parseAddress(address.c_str()).wait(io.waitScope)->listen();
      })) {
        return UnavailableError("cannot listen for RPC on " + address + ": " + ExceptionToStatus(*exception).message());
      }
      if (is_unix) {
        unix_paths_.push_back(address.substr(5));
        endpoints_.push_back(address);
      } else {
        endpoints_.push_back(address.substr(0, address.rfind(':') + 1) + std::to_string(receiver->getPort()));
      }
      receivers.push_back(kj::mv(receiver));
    }
    return Status::Ok();
  }

  kj::Promise<void> TickLoop() {
    return timer_->afterDelay(options_.tick_interval.count() * kj::MILLISECONDS).then([this] {
      options_.tick();
      return TickLoop();
    });
  }

  kj::Promise<void> AcceptLoop(kj::ConnectionReceiver& receiver) {
    return receiver.accept().then([this, &receiver](kj::Own<kj::AsyncIoStream> stream) {
      if (options_.metrics != nullptr) options_.metrics->accepted_connections().Inc();
      tasks_->add(Serve(kj::mv(stream)));
      return AcceptLoop(receiver);
    });
  }

  kj::Promise<void> Serve(kj::Own<kj::AsyncIoStream> stream) {
    if (!tls_) return ServeRpc(kj::mv(stream));
    return timer_->timeoutAfter(kTlsHandshakeTimeout, tls_->Wrap(kj::mv(stream)))
        .then([this](kj::Own<kj::AsyncIoStream> secure) { return ServeRpc(kj::mv(secure)); },
              [this](kj::Exception&& e) -> kj::Promise<void> {
                CountError("tls_handshake", e);
                return kj::READY_NOW;
              });
  }

  kj::Promise<void> ServeRpc(kj::Own<kj::AsyncIoStream> stream) {
    capnp::ReaderOptions reader;
    reader.traversalLimitInWords = options_.max_message_bytes / sizeof(capnp::word);
    reader.nestingLimit = 64;
    std::function<void()> on_message;
    if (options_.busy_poll.count() > 0) on_message = [this] { OnMessage(); };
    auto connection = kj::heap<Connection>(kj::mv(stream), factory_(), reader, std::move(on_message));
    if (options_.metrics != nullptr) options_.metrics->open_connections().Add(1);
    auto closed = kj::defer([metrics = options_.metrics] {
      if (metrics != nullptr) metrics->open_connections().Add(-1);
    });
    return connection->network.onDisconnect().attach(kj::mv(connection), kj::mv(closed));
  }

  void CountError(std::string_view reason, const kj::Exception& e) {
    if (options_.metrics != nullptr) options_.metrics->connection_errors(reason).Inc();
    spdlog::debug("rpc connection closed ({}): {}", reason, e.getDescription().cStr());
  }

  void taskFailed(kj::Exception&& exception) override {
    CountError(exception.getType() == kj::Exception::Type::DISCONNECTED ? "disconnected" : "protocol", exception);
  }

  RpcServerOptions options_;
  BootstrapFactory factory_;
  std::unique_ptr<TlsServer> tls_;
  std::vector<std::string> endpoints_;
  std::vector<std::string> unix_paths_;
  std::thread thread_;
  // Set by the server thread before Start() returns; used by Shutdown().
  const kj::Executor* executor_ = nullptr;
  // Owned by the server thread's event loop.
  kj::Own<kj::PromiseFulfiller<void>> stop_;
  kj::Timer* timer_ = nullptr;
  kj::TaskSet* tasks_ = nullptr;
  // Busy polling's state, on the server thread only.
  bool stopping_ = false;
  uint64_t messages_read_ = 0;
  kj::Own<kj::PromiseFulfiller<void>> wake_on_message_;
};

Result<std::unique_ptr<RpcServer>> RpcServer::Create(RpcServerOptions options, BootstrapFactory factory) {
  auto impl = std::make_unique<Impl>(std::move(options), std::move(factory));
  KVTIER_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<RpcServer>(new RpcServer(std::move(impl)));
}

RpcServer::RpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RpcServer::~RpcServer() { Shutdown(); }
const std::vector<std::string>& RpcServer::endpoints() const { return impl_->endpoints(); }
bool RpcServer::tls() const { return impl_->tls(); }
void RpcServer::Shutdown() { impl_->Shutdown(); }

}  // namespace kvtier::rpc
