// TLS for kvtier listeners and clients over OpenSSL: kj-tls for servers, the client end of
// services/rpc/tls_client_stream.h for clients (it matches IP addresses as well as names).
//
// Servers load a certificate chain and private key (PEM files); clients trust only the
// CA bundle they are given (never the system store: a cluster has its own CA) and verify
// the server's name, a DNS name or an IP address, against the certificate. Errors name
// the file and what was wrong.
//
// Thread safety: a TlsServer/TlsClient is used on the one event-loop thread that made it.
// Ownership: owns the key material (and OpenSSL context) its connections refer to; it must
// outlive them.
#pragma once

#include <kj/async-io.h>
#include <kj/compat/tls.h>
#include <openssl/types.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "common/tls_context.h"

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
  // Handshakes and verifies that the server's certificate is valid for `server_name`: a
  // DNS name, or an IPv4/IPv6 address matched against the certificate's IP addresses.
  kj::Promise<kj::Own<kj::AsyncIoStream>> Wrap(kj::Own<kj::AsyncIoStream> stream,
                                               const std::string& server_name);

 private:
  explicit TlsClient(TlsContextPtr context) : context_(std::move(context)) {}
  TlsContextPtr context_;
};

}  // namespace kvtier::rpc
