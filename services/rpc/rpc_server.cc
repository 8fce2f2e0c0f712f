#include "services/rpc/rpc_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <future>
#include <thread>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <spdlog/spdlog.h>

#include "common/listener_health.h"
#include "common/thread_name.h"
#include "services/rpc/auth_throttle.h"
#include "services/rpc/peer_address.h"
#include "services/rpc/buffered_message_stream.h"
#include "common/connection_admission.h"
#include "services/rpc/status_mapping.h"
#include "services/rpc/tls.h"

namespace kvtier::rpc {
namespace {

// A failed accept is retried after this, doubling while it keeps failing with nothing to shed.
constexpr auto kAcceptRetryMin = std::chrono::milliseconds(10);
constexpr auto kAcceptRetryMax = std::chrono::milliseconds(1000);
constexpr auto kAcceptRetryAfterShed = std::chrono::milliseconds(1);

// One client connection: the stream, the two-party network over it and the RPC system
// serving the connection's bootstrap capability. Destroying it closes the connection.
struct Connection {
  Connection(kj::Own<kj::AsyncIoStream> s, capnp::Capability::Client bootstrap,
             capnp::ReaderOptions options, BufferedMessageStreamOptions stream_options)
      : stream(kj::mv(s)),
        messages(*stream, std::move(stream_options)),
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
    return UnavailableError("cannot listen on unix:" + path +
                            ": the path exists and is not a socket");
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgumentError("unix socket path is longer than " +
                                std::to_string(sizeof(addr.sun_path) - 1) + " bytes: " + path);
  }
  path.copy(addr.sun_path, path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  if (live)
    return UnavailableError("cannot listen on unix:" + path +
                            ": another server is listening there");
  unlink(path.c_str());
  return Status::Ok();
}

}  // namespace

class RpcServer::Impl final : private kj::TaskSet::ErrorHandler {
 public:
  Impl(RpcServerOptions options, BootstrapFactory factory)
      : options_(WithDefaults(std::move(options))),
        factory_(std::move(factory)),
        admission_(
            {.max_connections = options_.limits.max_connections,
             .max_unauthenticated = options_.limits.max_unauthenticated,
             .max_unauthenticated_per_address = options_.limits.max_unauthenticated_per_address}),
        throttle_({.burst = options_.limits.auth_failure_burst,
                   .per_second = options_.limits.auth_failures_per_second}) {}
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

  void RunOnLoop(kj::FunctionParam<void()> fn) {
    executor_->executeSync([&fn] { fn(); });
  }

  const std::vector<std::string>& endpoints() const { return endpoints_; }
  bool tls() const { return !options_.tls_cert_file.empty(); }

  Status Readiness() const { return health_.Readiness("the RPC listener"); }

 private:
  class Gate;

  static RpcServerOptions WithDefaults(RpcServerOptions options) {
    if (options.limits.max_connections == 0) options.limits.max_connections = DescriptorShare(1, 2);
    return options;
  }

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
    for (auto& receiver : receivers) tasks.add(AcceptLoop(*receiver, kAcceptRetryMin));
    if (options_.tick) tasks.add(TickLoop());
    if (options_.on_loop) {
      Result<kj::Promise<void>> more = options_.on_loop(io);
      if (!more.ok()) {
        started.set_value(more.status());
        return;
      }
      tasks.add(std::move(more).value());
    }
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
      KVTIER_ASSIGN_OR_RETURN(tls_,
                              TlsServer::Create(options_.tls_cert_file, options_.tls_key_file));
    }
    if (options_.listen.empty())
      return InvalidArgumentError("RpcServer needs at least one listen address");
    for (const std::string& address : options_.listen) {
      const bool is_unix = address.starts_with("unix:");
      if (is_unix) KVTIER_RETURN_IF_ERROR(PrepareUnixSocketPath(address.substr(5)));
      kj::Own<kj::ConnectionReceiver> receiver;
      KJ_IF_MAYBE (exception, kj::runCatchingExceptions([&] {
                     receiver = io.provider->getNetwork()
                                    .parseAddress(address.c_str())
                                    .wait(io.waitScope)
                                    ->listen();
                   })) {
        return UnavailableError("cannot listen for RPC on " + address + ": " +
                                ExceptionToStatus(*exception).message());
      }
      if (is_unix) {
        unix_paths_.push_back(address.substr(5));
        endpoints_.push_back(address);
      } else {
        endpoints_.push_back(address.substr(0, address.rfind(':') + 1) +
                             std::to_string(receiver->getPort()));
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

  // Accepts until Shutdown(); `retry` is how long the next failure waits before accepting again.
  kj::Promise<void> AcceptLoop(kj::ConnectionReceiver& receiver, std::chrono::milliseconds retry) {
    // KJ's accept() throws where accept4 fails (EMFILE, ENFILE, ENOBUFS): evalNow makes
    // that a failed promise, handled below like any other.
    return kj::evalNow([&receiver] { return receiver.accept(); })
        .then(
            [this, &receiver](kj::Own<kj::AsyncIoStream> stream) {
              Accepted(kj::mv(stream));
              return AcceptLoop(receiver, kAcceptRetryMin);
            },
            [this, &receiver, retry](kj::Exception&& e) {
              const bool shed = AcceptFailed(e);
              // A shed connection's descriptor comes back on the loop's next turn: retry at
              // once after it, or a backlog of attackers would delay a good client by the
              // backoff each.
              const auto wait = shed ? kAcceptRetryAfterShed : retry;
              return timer_->afterDelay(wait.count() * kj::MILLISECONDS)
                  .then([this, &receiver, retry, shed] {
                    return AcceptLoop(receiver,
                                      shed ? retry : std::min(retry * 2, kAcceptRetryMax));
                  });
            });
  }

  // Counts, records and (sampled) logs a failed accept, and sheds the oldest
  // unauthenticated connection to free a descriptor. Whether it shed one.
  bool AcceptFailed(const kj::Exception& e) {
    const std::string error = e.getDescription().cStr();
    if (options_.metrics != nullptr) options_.metrics->accept_errors().Inc();
    const bool shed = admission_.ShedOldest();
    if (shed && options_.metrics != nullptr) options_.metrics->shed_connections().Inc();
    if (const std::optional<uint64_t> failures = health_.Failed(error)) {
      spdlog::warn("RPC listener {}: accept failed ({} time(s) since the last line): {}; {}",
                   endpoints_.front(), *failures, error,
                   shed ? "shed the oldest unauthenticated connection"
                        : "no unauthenticated connection to shed");
    }
    return shed;
  }

  void Accepted(kj::Own<kj::AsyncIoStream> stream);
  kj::Promise<void> Serve(kj::Own<kj::AsyncIoStream> stream, const std::shared_ptr<Gate>& gate);
  kj::Promise<void> ServeRpc(kj::Own<kj::AsyncIoStream> stream, const std::shared_ptr<Gate>& gate);
  kj::Promise<void> AuthDeadline(std::shared_ptr<Gate> gate);
  void Closed(Gate& gate);

  void CountError(std::string_view reason, const kj::Exception& e) {
    if (options_.metrics != nullptr) options_.metrics->connection_errors(reason).Inc();
    spdlog::debug("rpc connection closed ({}): {}", reason, e.getDescription().cStr());
  }

  void taskFailed(kj::Exception&& exception) override {
    CountError(
        exception.getType() == kj::Exception::Type::DISCONNECTED ? "disconnected" : "protocol",
        exception);
  }

  const RpcServerOptions options_;
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
  ConnectionAdmission admission_;  // the server thread's
  AuthThrottle throttle_;
  // Busy polling's state, on the server thread only.
  bool stopping_ = false;
  uint64_t messages_read_ = 0;
  kj::Own<kj::PromiseFulfiller<void>> wake_on_message_;
  ListenerHealth health_;  // failed accepts, for Readiness() (any thread)
};

// One connection's gate: its place in the admission table, its message limit, its shedding.
class RpcServer::Impl::Gate final : public ConnectionGate {
 public:
  Gate(Impl& server, std::string peer)
      : server_(server),
        peer_(std::move(peer)),
        message_limit_words_(server.options_.limits.pre_auth_message_bytes / sizeof(capnp::word)) {
    auto shed = kj::newPromiseAndFulfiller<void>();
    shed_ = std::make_unique<Shedding>(Shedding{shed.promise.fork(), kj::mv(shed.fulfiller)});
  }

  const std::string& peer() const override { return peer_; }

  Status BeforeAuthenticate() override {
    Status admitted = server_.throttle_.Admit(peer_);
    if (!admitted.ok() && server_.options_.metrics != nullptr)
      server_.options_.metrics->auth_throttled().Inc();
    return admitted;
  }

  void AuthenticationFailed() override {
    if (const std::optional<uint64_t> failures = server_.throttle_.Failed(peer_)) {
      spdlog::warn(
          "RPC listener {}: authentication failed from {} ({} time(s) since the last line)",
          server_.endpoints_.front(), peer_, *failures);
    }
  }

  void Authenticated() override {
    if (authenticated_) return;
    authenticated_ = true;
    message_limit_words_ = server_.options_.max_message_bytes / sizeof(capnp::word);
    server_.admission_.Authenticated(id);
    if (server_.options_.metrics != nullptr)
      server_.options_.metrics->unauthenticated_connections().Add(-1);
  }

  bool authenticated() const { return authenticated_; }
  const uint64_t* message_limit_words() const { return &message_limit_words_; }
  // Resolves when the listener sheds this connection.
  kj::Promise<void> WhenShed() { return shed_->promise.addBranch(); }
  void Shed() { shed_->fulfiller->fulfill(); }

  ConnectionAdmission::Id id = 0;

 private:
  Impl& server_;
  const std::string peer_;
  uint64_t message_limit_words_;
  bool authenticated_ = false;
  // Behind a unique_ptr: KJ's members' destructors may throw, ConnectionGate's may not.
  struct Shedding {
    kj::ForkedPromise<void> promise;
    kj::Own<kj::PromiseFulfiller<void>> fulfiller;
  };
  std::unique_ptr<Shedding> shed_;
};

void RpcServer::Impl::Accepted(kj::Own<kj::AsyncIoStream> stream) {
  RpcMetrics* metrics = options_.metrics;
  if (metrics != nullptr) metrics->accepted_connections().Inc();
  auto gate = std::make_shared<Gate>(*this, PeerAddress(*stream));
  const ConnectionAdmission::Admitted admitted =
      admission_.Admit(gate->peer(), [weak = std::weak_ptr<Gate>(gate)] {
        if (const std::shared_ptr<Gate> shed = weak.lock()) shed->Shed();
      });
  if (metrics != nullptr && admitted.shed > 0) metrics->shed_connections().Inc(admitted.shed);
  if (admitted.verdict != ConnectionAdmission::Verdict::kAdmitted) {
    const bool by_address = admitted.verdict == ConnectionAdmission::Verdict::kRefusedAddress;
    if (metrics != nullptr) metrics->refused_connections(by_address ? "address" : "full").Inc();
    spdlog::debug(
        "rpc connection from {} refused: {}", gate->peer(),
        by_address ? "too many unauthenticated connections from it" : "the listener is full");
    return;  // dropping the stream closes it
  }
  gate->id = admitted.id;
  if (metrics != nullptr) {
    metrics->open_connections().Add(1);
    metrics->unauthenticated_connections().Add(1);
  }
  tasks_->add(Serve(kj::mv(stream), gate).attach(kj::defer([this, gate] { Closed(*gate); })));
}

void RpcServer::Impl::Closed(Gate& gate) {
  admission_.Closed(gate.id);
  if (options_.metrics == nullptr) return;
  options_.metrics->open_connections().Add(-1);
  if (!gate.authenticated()) options_.metrics->unauthenticated_connections().Add(-1);
}

// Serves until the peer disconnects, the listener sheds the connection, or the
// authentication deadline passes unauthenticated.
kj::Promise<void> RpcServer::Impl::Serve(kj::Own<kj::AsyncIoStream> stream,
                                         const std::shared_ptr<Gate>& gate) {
  kj::Promise<void> serving = nullptr;
  if (!tls_) {
    serving = ServeRpc(kj::mv(stream), gate);
  } else {
    serving =
        tls_->Wrap(kj::mv(stream))
            .then([this, gate](
                      kj::Own<kj::AsyncIoStream> secure) { return ServeRpc(kj::mv(secure), gate); },
                  [this](kj::Exception&& e) -> kj::Promise<void> {
                    CountError("tls_handshake", e);
                    return kj::READY_NOW;
                  });
  }
  return serving.exclusiveJoin(gate->WhenShed()).exclusiveJoin(AuthDeadline(gate));
}

kj::Promise<void> RpcServer::Impl::AuthDeadline(std::shared_ptr<Gate> gate) {
  return timer_->afterDelay(options_.limits.auth_deadline.count() * kj::MILLISECONDS)
      .then([this, gate = std::move(gate)]() -> kj::Promise<void> {
        if (gate->authenticated()) return kj::NEVER_DONE;
        CountError("auth_deadline",
                   KJ_EXCEPTION(DISCONNECTED, "not authenticated within the deadline"));
        return kj::READY_NOW;
      });
}

kj::Promise<void> RpcServer::Impl::ServeRpc(kj::Own<kj::AsyncIoStream> stream,
                                            const std::shared_ptr<Gate>& gate) {
  capnp::ReaderOptions reader;
  reader.traversalLimitInWords = options_.max_message_bytes / sizeof(capnp::word);
  reader.nestingLimit = 64;
  BufferedMessageStreamOptions stream_options;
  stream_options.max_message_words = gate->message_limit_words();
  if (options_.busy_poll.count() > 0) stream_options.on_message = [this] { OnMessage(); };
  auto connection =
      kj::heap<Connection>(kj::mv(stream), factory_(gate), reader, std::move(stream_options));
  return connection->network.onDisconnect().attach(kj::mv(connection));
}

ConnectionLimits ConnectionLimitsFrom(const ConnectionsConfig& config) {
  return {.auth_deadline = std::chrono::milliseconds(config.auth_deadline_ms),
          .pre_auth_message_bytes = config.pre_auth_message_bytes,
          .max_connections = config.max,
          .max_unauthenticated = config.max_unauthenticated,
          .max_unauthenticated_per_address = config.max_unauthenticated_per_address,
          .auth_failure_burst = config.auth_failure_burst,
          .auth_failures_per_second = config.auth_failures_per_minute / 60.0};
}

Result<std::unique_ptr<RpcServer>> RpcServer::Create(RpcServerOptions options,
                                                     BootstrapFactory factory) {
  auto impl = std::make_unique<Impl>(std::move(options), std::move(factory));
  KVTIER_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<RpcServer>(new RpcServer(std::move(impl)));
}

RpcServer::RpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RpcServer::~RpcServer() { Shutdown(); }
const std::vector<std::string>& RpcServer::endpoints() const { return impl_->endpoints(); }
bool RpcServer::tls() const { return impl_->tls(); }
Status RpcServer::Readiness() const { return impl_->Readiness(); }
void RpcServer::Shutdown() { impl_->Shutdown(); }
void RpcServer::RunOnLoop(kj::FunctionParam<void()> fn) { impl_->RunOnLoop(fn); }

}  // namespace kvtier::rpc
