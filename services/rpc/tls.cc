#include "services/rpc/tls.h"

#include <memory>

#include "common/file.h"
#include "services/rpc/status_mapping.h"
#include "services/rpc/tls_client_stream.h"

namespace kvtier::rpc {

namespace {

// kj-tls reports bad PEM by throwing; turn that into a Status naming the file.
template <typename T>
Result<T> ParsePem(const std::string& path, const std::string& what) {
  KVTIER_ASSIGN_OR_RETURN(const std::string pem, ReadTextFile(path, what));
  kj::Maybe<T> parsed;
  KJ_IF_MAYBE (exception,
               kj::runCatchingExceptions([&] { parsed = T(kj::StringPtr(pem.c_str())); })) {
    return InvalidArgumentError(what + " " + path + ": not a valid PEM file (" +
                                ExceptionToStatus(*exception).message() + ")");
  }
  KJ_IF_MAYBE (value, parsed) {
    return kj::mv(*value);
  }
  return InvalidArgumentError(what + " " + path + ": empty");
}

}  // namespace

Result<std::unique_ptr<TlsServer>> TlsServer::Create(const std::string& cert_file,
                                                     const std::string& key_file) {
  KVTIER_ASSIGN_OR_RETURN(kj::TlsCertificate cert,
                          ParsePem<kj::TlsCertificate>(cert_file, "tls.cert_file"));
  KVTIER_ASSIGN_OR_RETURN(kj::TlsPrivateKey key,
                          ParsePem<kj::TlsPrivateKey>(key_file, "tls.key_file"));
  std::unique_ptr<TlsServer> server(new TlsServer(kj::mv(key), kj::mv(cert)));
  kj::TlsContext::Options options;
  options.defaultKeypair = server->keypair_;
  options.useSystemTrustStore = false;
  KJ_IF_MAYBE (exception, kj::runCatchingExceptions([&] {
                 server->context_ = kj::heap<kj::TlsContext>(kj::mv(options));
               })) {
    return InvalidArgumentError(
        "tls.cert_file " + cert_file + " and tls.key_file " + key_file +
        " do not make a usable keypair: " + ExceptionToStatus(*exception).message());
  }
  return server;
}

TlsServer::TlsServer(kj::TlsPrivateKey key, kj::TlsCertificate cert)
    : key_(kj::mv(key)), cert_(kj::mv(cert)), keypair_{key_, cert_} {}

kj::Promise<kj::Own<kj::AsyncIoStream>> TlsServer::Wrap(kj::Own<kj::AsyncIoStream> stream) {
  return context_->wrapServer(kj::mv(stream));
}

Result<std::unique_ptr<TlsClient>> TlsClient::Create(const std::string& ca_file) {
  KVTIER_ASSIGN_OR_RETURN(TlsContextPtr context, MakeTlsClientContext(ca_file));
  return std::unique_ptr<TlsClient>(new TlsClient(std::move(context)));
}

kj::Promise<kj::Own<kj::AsyncIoStream>> TlsClient::Wrap(kj::Own<kj::AsyncIoStream> stream,
                                                        const std::string& server_name) {
  return ConnectTls(*context_, kj::mv(stream), server_name);
}

}  // namespace kvtier::rpc
