#include "services/rpc/http_listener.h"

#include <kj/debug.h>
#include <spdlog/spdlog.h>

#include <map>
#include <memory>

#include "services/rpc/peer_address.h"
#include "services/rpc/status_mapping.h"
#include "services/rpc/tls.h"

namespace kvtier::rpc {
namespace {

class HttpListenerImpl final : public HttpListener, private kj::TaskSet::ErrorHandler {
 public:
  HttpListenerImpl(kj::AsyncIoContext& io, HttpListenerOptions options)
      : io_(io), options_(std::move(options)) {}

  Status Start(
      kj::Function<kj::Own<HttpPeerService>(kj::HttpHeaderTable::Builder&)>& make_service) {
    if (!options_.tls_cert_file.empty() || !options_.tls_key_file.empty()) {
      KVTIER_ASSIGN_OR_RETURN(tls_,
                              TlsServer::Create(options_.tls_cert_file, options_.tls_key_file));
    }
    kj::HttpHeaderTable::Builder builder;
    service_ = make_service(builder);
    table_ = builder.build();
    kj::HttpServerSettings settings;
    settings.headerTimeout = options_.header_timeout.count() * kj::MILLISECONDS;
    settings.pipelineTimeout = options_.idle_timeout.count() * kj::MILLISECONDS;
    server_ = kj::heap<kj::HttpServer>(
        io_.provider->getTimer(), *table_,
        [this](kj::AsyncIoStream& connection) {
          auto peer = peers_.find(&connection);
          return service_->ForPeer(peer != peers_.end() ? peer->second : "unknown");
        },
        settings);
    for (const std::string& address : options_.listen) {
      kj::Own<kj::ConnectionReceiver> receiver;
      KJ_IF_MAYBE (exception, kj::runCatchingExceptions([&] {
                     receiver = io_.provider->getNetwork()
                                    .parseAddress(address.c_str())
                                    .wait(io_.waitScope)
                                    ->listen();
                   })) {
        return UnavailableError("cannot listen for HTTP on " + address + ": " +
                                ExceptionToStatus(*exception).message());
      }
      endpoints_.push_back(address.substr(0, address.rfind(':') + 1) +
                           std::to_string(receiver->getPort()));
      receivers_.push_back(kj::mv(receiver));
    }
    return Status::Ok();
  }

  kj::Promise<void> Run() override {
    kj::Vector<kj::Promise<void>> loops;
    for (auto& receiver : receivers_) loops.add(AcceptLoop(*receiver));
    return kj::joinPromises(loops.releaseAsArray());
  }

  const std::vector<std::string>& endpoints() const override { return endpoints_; }

 private:
  kj::Promise<void> AcceptLoop(kj::ConnectionReceiver& receiver) {
    return kj::evalNow([&receiver] { return receiver.accept(); })
        .then(
            [this, &receiver](kj::Own<kj::AsyncIoStream> stream) {
              Accepted(kj::mv(stream));
              return AcceptLoop(receiver);
            },
            [this, &receiver](kj::Exception&& e) {
              spdlog::warn("HTTP listener {}: accept failed: {}", endpoints_.front(),
                           e.getDescription().cStr());
              return io_.provider->getTimer()
                  .afterDelay(100 * kj::MILLISECONDS)
                  .then([this, &receiver] { return AcceptLoop(receiver); });
            });
  }

  // Serves `stream`, the peer's address kept by the stream it is served on (the
  // server's service factory looks it up) until the connection ends.
  void Accepted(kj::Own<kj::AsyncIoStream> stream) {
    if (open_ >= options_.max_connections) return;  // dropped: closes the connection
    ++open_;
    auto key = std::make_shared<const kj::AsyncIoStream*>(nullptr);
    std::string peer = PeerAddress(*stream);
    auto serve = [this, key, peer = std::move(peer)](kj::Own<kj::AsyncIoStream> connection) {
      *key = connection.get();
      peers_[*key] = peer;
      return server_->listenHttp(kj::mv(connection));
    };
    kj::Promise<void> serving = nullptr;
    if (tls_) {
      auto deadline =
          io_.provider->getTimer().afterDelay(options_.header_timeout.count() * kj::MILLISECONDS);
      serving = tls_->Wrap(kj::mv(stream))
                    .exclusiveJoin(deadline.then([]() -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
                      return KJ_EXCEPTION(DISCONNECTED, "TLS handshake timed out");
                    }))
                    .then(kj::mv(serve));
    } else {
      serving = serve(kj::mv(stream));
    }
    tasks_.add(serving.attach(kj::defer([this, key] {
      if (*key != nullptr) peers_.erase(*key);
      --open_;
    })));
  }

  void taskFailed(kj::Exception&& e) override {
    spdlog::debug("HTTP connection closed: {}", e.getDescription().cStr());
  }

  kj::AsyncIoContext& io_;
  HttpListenerOptions options_;
  std::unique_ptr<TlsServer> tls_;
  kj::Own<kj::HttpHeaderTable> table_;
  kj::Own<HttpPeerService> service_;
  // The peer of each connection being served, by the stream it is served on.
  std::map<const kj::AsyncIoStream*, std::string> peers_;
  kj::Own<kj::HttpServer> server_;
  std::vector<kj::Own<kj::ConnectionReceiver>> receivers_;
  std::vector<std::string> endpoints_;
  uint32_t open_ = 0;
  kj::TaskSet tasks_{*this};
};

}  // namespace

Result<kj::Own<HttpListener>> HttpListener::Create(
    kj::AsyncIoContext& io, HttpListenerOptions options,
    kj::Function<kj::Own<HttpPeerService>(kj::HttpHeaderTable::Builder&)> make_service) {
  auto listener = kj::heap<HttpListenerImpl>(io, std::move(options));
  KVTIER_RETURN_IF_ERROR(listener->Start(make_service));
  return kj::Own<HttpListener>(kj::mv(listener));
}

}  // namespace kvtier::rpc
