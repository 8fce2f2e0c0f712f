// TLS for kvtier listeners and clients (kj-tls over OpenSSL).
//
// Servers load a certificate chain and private key (PEM files); clients trust only the
// CA bundle they are given (never the system store: a cluster has its own CA) and verify
// the server's name against the certificate. Errors name the file and what was wrong.
//
// Thread safety: a TlsServer/TlsClient is used on the one event-loop thread that made it.
// Ownership: owns the key material the kj::TlsContext refers to.
#pragma once

#include <memory>
#include <string>

#include <kj/async-io.h>
#include <kj/compat/tls.h>

#include "common/status.h"

namespace kvtier::rpc {

class TlsServer {
 public:
  [[nodiscard]] static Result<std::unique_ptr<TlsServer>> Create(const std::string& cert_file,
                                                                 const std::string& key_file);
  // Performs the handshake on an accepted connection.
  kj::Promise<kj::Own<kj::AsyncIoStream>> Wrap(kj::Own<kj::AsyncIoStream> stream);

 private:
  TlsServer(kj::TlsPrivateKey key, kj::TlsCertificate cert);
  kj::TlsPrivateKey key_;
  kj::TlsCertificate cert_;
  kj::TlsKeypair keypair_;
  kj::Own<kj::TlsContext> context_;
};

class TlsClient {
 public:
  [[nodiscard]] static Result<std::unique_ptr<TlsClient>> Create(const std::string& ca_file);
  // Handshakes and verifies that the server's certificate is valid for `server_name`.
  kj::Promise<kj::Own<kj::AsyncIoStream>> Wrap(kj::Own<kj::AsyncIoStream> stream,
                                               const std::string& server_name);

 private:
  explicit TlsClient(kj::TlsCertificate ca);
  kj::TlsCertificate ca_;
  kj::Own<kj::TlsContext> context_;
};

}  // namespace kvtier::rpc
