#include "services/rpc/rpc_client.h"

#include "common/thread_name.h"
#include "services/rpc/rpc_client_impl.h"

#include <capnp/message.h>

namespace kvtier::rpc {
namespace {

std::string HostOf(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return host;
}

ServerVersion ToServerVersion(schema::ServerInfo::Reader info) {
  ServerVersion v{info.getVersion().cStr(), info.getSchemaVersion(), {}, info.getNodeId().cStr()};
  for (capnp::Text::Reader role : info.getRoles()) v.roles.emplace_back(role.cStr());
  return v;
}

}  // namespace

RpcClient::Impl::Impl(RpcClientOptions options) : options_(std::move(options)) {
  if (options_.tls_server_name.empty()) options_.tls_server_name = HostOf(options_.address);
}

RpcClient::Impl::~Impl() {
  if (!thread_.joinable()) return;
  executor_->executeSync([this] { stop_->fulfill(); });
  thread_.join();
}

Status RpcClient::Impl::Start() {
  if (!options_.tls_ca_file.empty()) {
    KVTIER_ASSIGN_OR_RETURN(tls_, TlsClient::Create(options_.tls_ca_file));
  }
  std::promise<Status> ready;
  std::future<Status> started = ready.get_future();
  thread_ = std::thread([this, &ready] { Loop(ready); });
  if (Status loop = started.get(); !loop.ok()) {
    thread_.join();
    return loop;
  }
  return executor_->executeSync([this] { return Guard<Status>(ConnectAndAuthenticate()); });
}

Result<PingReply> RpcClient::Impl::Ping(const std::string& payload) {
  return executor_->executeSync([&]() -> kj::Promise<Result<PingReply>> {
    auto request = session_->pingRequest();
    request.setPayload(
        capnp::Data::Reader(reinterpret_cast<const kj::byte*>(payload.data()), payload.size()));
    return Guard<Result<PingReply>>(request.send().then([](auto response) -> Result<PingReply> {
      const capnp::Data::Reader echoed = response.getPayload();
      return PingReply{std::string(echoed.asChars().begin(), echoed.size()),
                       response.getServerTimeNs()};
    }));
  });
}

Result<ServerVersion> RpcClient::Impl::Version() {
  return executor_->executeSync([&]() -> kj::Promise<Result<ServerVersion>> {
    return Guard<Result<ServerVersion>>(
        session_->versionRequest().send().then([](auto response) -> Result<ServerVersion> {
          return ToServerVersion(response.getServer());
        }));
  });
}

void RpcClient::Impl::Loop(std::promise<Status>& ready) {
  NameThisThread("kvt-client");
  // An event loop needs descriptors (epoll, signalfd, eventfd): out of them, the client
  // fails to connect, as when the server cannot be reached, and the process goes on.
  kj::Maybe<kj::AsyncIoContext> made;
  KJ_IF_MAYBE (exception, kj::runCatchingExceptions([&] { made = kj::setupAsyncIo(); })) {
    ready.set_value(UnavailableError("cannot make the RPC client's event loop: " +
                                     std::string(exception->getDescription().cStr())));
    return;
  }
  kj::AsyncIoContext& io = KJ_ASSERT_NONNULL(made);
  io_ = &io;
  auto stop = kj::newPromiseAndFulfiller<void>();
  stop_ = kj::mv(stop.fulfiller);
  executor_ = &kj::getCurrentThreadExecutor();
  ready.set_value(Status::Ok());
  stop.promise.wait(io.waitScope);
  // Everything KJ owns dies on the thread that made it.
  watch_disconnect_ = nullptr;
  session_ = nullptr;
  rpc_ = nullptr;
  network_ = nullptr;
  messages_ = nullptr;
  stream_ = nullptr;
}

kj::Promise<Status> RpcClient::Impl::ConnectAndAuthenticate() {
  return io_->provider->getNetwork()
      .parseAddress(options_.address.c_str())
      .then([](kj::Own<kj::NetworkAddress> address) {
        return address->connect().attach(kj::mv(address));
      })
      .then([this](kj::Own<kj::AsyncIoStream> stream) -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
        if (tls_) return tls_->Wrap(kj::mv(stream), options_.tls_server_name);
        return kj::mv(stream);
      })
      .then([this](kj::Own<kj::AsyncIoStream> stream) {
        stream_ = kj::mv(stream);
        capnp::ReaderOptions reader;
        reader.traversalLimitInWords = options_.max_message_bytes / sizeof(capnp::word);
        messages_ = kj::heap<BufferedMessageStream>(*stream_);
        network_ = kj::heap<capnp::TwoPartyVatNetwork>(*messages_,
                                                       capnp::rpc::twoparty::Side::CLIENT, reader);
        rpc_ = kj::heap<capnp::RpcSystem<capnp::rpc::twoparty::VatId>>(
            capnp::makeRpcClient(*network_));
        capnp::MallocMessageBuilder message(8);
        auto server_id = message.initRoot<capnp::rpc::twoparty::VatId>();
        server_id.setSide(capnp::rpc::twoparty::Side::SERVER);
        auto bootstrap = rpc_->bootstrap(server_id).castAs<schema::Bootstrap>();
        auto request = bootstrap.authenticateRequest();
        request.setToken(options_.token.c_str());
        request.setActFor(options_.act_for.c_str());
        return request.send();
      })
      .then([this](capnp::Response<schema::Bootstrap::AuthenticateResults> response) -> Status {
        session_ = kj::heap<schema::Session::Client>(response.getSession());
        tenant_ = response.getTenant().cStr();
        server_ = ToServerVersion(response.getServer());
        connected_.store(true, std::memory_order_release);
        watch_disconnect_ =
            network_->onDisconnect()
                .then([this] { connected_.store(false, std::memory_order_release); })
                .eagerlyEvaluate([this](kj::Exception&&) { connected_.store(false); });
        return Status::Ok();
      });
}

Result<std::unique_ptr<RpcClient>> RpcClient::Connect(RpcClientOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  Status status = impl->Start();
  if (!status.ok()) return status.WithContext("connect");
  return std::unique_ptr<RpcClient>(new RpcClient(std::move(impl)));
}

RpcClient::RpcClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RpcClient::~RpcClient() = default;
const std::string& RpcClient::tenant() const { return impl_->tenant(); }
const ServerVersion& RpcClient::server() const { return impl_->server(); }
bool RpcClient::connected() const { return impl_->connected(); }
Result<PingReply> RpcClient::Ping(const std::string& payload) { return impl_->Ping(payload); }
Result<ServerVersion> RpcClient::Version() { return impl_->Version(); }

}  // namespace kvtier::rpc
