#include "common/tls_context.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <cstdint>

#include "common/file.h"

namespace kvtier {
namespace {

bool IsIpLiteral(const std::string& name) {
  unsigned char address[16];
  return inet_pton(AF_INET, name.c_str(), address) == 1 ||
         inet_pton(AF_INET6, name.c_str(), address) == 1;
}

TlsContextPtr Own(SSL_CTX* context) { return TlsContextPtr(context, SSL_CTX_free); }

// TLS 1.3 suites, AES-128-GCM first: with AES-NI it encrypts about a sixth faster than
// AES-256-GCM, and bulk blocks are what these connections carry.
constexpr const char* kSuites =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

void Configure(SSL_CTX* context) {
  SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
  SSL_CTX_set_options(context, SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_ciphersuites(context, kSuites);
}

// The BIO owns its socket descriptor's number (SocketDestroy frees it); the socket is the caller's.
int FdOf(BIO* bio) { return *static_cast<const int*>(BIO_get_data(bio)); }

// A transient failure (EAGAIN: non-blocking, or a blocking socket's SO_*TIMEO passed) is
// a retry for OpenSSL (SSL_ERROR_WANT_*); EINTR is retried here.
int SocketWrite(BIO* bio, const char* data, int size) {
  BIO_clear_retry_flags(bio);
  ssize_t n;
  do {
    n = send(FdOf(bio), data, static_cast<size_t>(size), MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_write(bio);
  return static_cast<int>(n);
}

int SocketRead(BIO* bio, char* data, int size) {
  BIO_clear_retry_flags(bio);
  ssize_t n;
  do {
    n = recv(FdOf(bio), data, static_cast<size_t>(size), 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_read(bio);
  return static_cast<int>(n);
}

long SocketControl(BIO*, int command, long, void*) { return command == BIO_CTRL_FLUSH ? 1 : 0; }

int SocketCreate(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

int SocketDestroy(BIO* bio) {
  delete static_cast<int*>(BIO_get_data(bio));
  BIO_set_data(bio, nullptr);
  return 1;
}

const BIO_METHOD* SocketMethod() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* made = BIO_meth_new(
        BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR, "kvtier socket");
    if (made == nullptr) return made;
    BIO_meth_set_write(made, SocketWrite);
    BIO_meth_set_read(made, SocketRead);
    BIO_meth_set_ctrl(made, SocketControl);
    BIO_meth_set_create(made, SocketCreate);
    BIO_meth_set_destroy(made, SocketDestroy);
    return made;
  }();
  return method;
}

}  // namespace

std::string TlsErrors() {
  std::string text;
  while (const unsigned long error = ERR_get_error()) {
    char line[256];
    ERR_error_string_n(error, line, sizeof(line));
    if (!text.empty()) text += "; ";
    text += line;
  }
  return text.empty() ? "no OpenSSL error queued" : text;
}

Result<TlsContextPtr> MakeTlsClientContext(const std::string& ca_file) {
  KVTIER_ASSIGN_OR_RETURN(const std::string pem, ReadTextFile(ca_file, "tls.ca_file"));
  ERR_clear_error();
  TlsContextPtr context = Own(SSL_CTX_new(TLS_client_method()));
  if (context == nullptr) return InternalError("cannot make an OpenSSL context for TLS clients");
  Configure(context.get());
  SSL_CTX_set_verify(context.get(), SSL_VERIFY_PEER, nullptr);
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  X509_STORE* trusted = SSL_CTX_get_cert_store(context.get());
  int certificates = 0;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    const int added = X509_STORE_add_cert(trusted, cert);
    X509_free(cert);
    if (added != 1)
      return InvalidArgumentError("tls.ca_file " + ca_file + ": a certificate cannot be trusted");
    ++certificates;
  }
  ERR_clear_error();  // the read that found no further certificate
  if (certificates == 0) {
    return InvalidArgumentError("tls.ca_file " + ca_file +
                                ": not a valid PEM file (no certificate in it)");
  }
  return context;
}

Result<TlsContextPtr> MakeTlsServerContext(const std::string& cert_file,
                                           const std::string& key_file) {
  // Read first, so that a missing file is named as ReadTextFile names it.
  KVTIER_RETURN_IF_ERROR(ReadTextFile(cert_file, "tls.cert_file").status());
  KVTIER_RETURN_IF_ERROR(ReadTextFile(key_file, "tls.key_file").status());
  ERR_clear_error();
  TlsContextPtr context = Own(SSL_CTX_new(TLS_server_method()));
  if (context == nullptr) return InternalError("cannot make an OpenSSL context for TLS servers");
  Configure(context.get());
  if (SSL_CTX_use_certificate_chain_file(context.get(), cert_file.c_str()) != 1) {
    return InvalidArgumentError("tls.cert_file " + cert_file +
                                ": not a valid PEM certificate chain (" + TlsErrors() + ")");
  }
  if (SSL_CTX_use_PrivateKey_file(context.get(), key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
      ERR_clear_error();
      return InvalidArgumentError("tls.cert_file " + cert_file + " and tls.key_file " + key_file +
                                  " do not make a usable keypair: the key is not the "
                                  "certificate's");
    }
    return InvalidArgumentError("tls.key_file " + key_file + ": not a valid PEM private key (" +
                                TlsErrors() + ")");
  }
  if (SSL_CTX_check_private_key(context.get()) != 1) {
    return InvalidArgumentError("tls.cert_file " + cert_file + " and tls.key_file " + key_file +
                                " do not make a usable keypair: " + TlsErrors());
  }
  return context;
}

Status ExpectTlsServerName(SSL* ssl, const std::string& server_name) {
  if (server_name.empty())
    return InvalidArgumentError("TLS needs the name the server's certificate must carry");
  ERR_clear_error();
  bool named = false;
  if (IsIpLiteral(server_name)) {
    named = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), server_name.c_str()) == 1;
  } else {
    named = SSL_set_tlsext_host_name(ssl, server_name.c_str()) == 1 &&
            SSL_set1_host(ssl, server_name.c_str()) == 1;
  }
  if (!named) {
    return InvalidArgumentError("cannot expect server name \"" + server_name +
                                "\": " + TlsErrors());
  }
  return Status::Ok();
}

Status AttachTlsSocket(SSL* ssl, int fd) {
  const BIO_METHOD* method = SocketMethod();
  BIO* bio = method != nullptr ? BIO_new(method) : nullptr;
  if (bio == nullptr) return InternalError("cannot make a TLS socket BIO: " + TlsErrors());
  BIO_set_data(bio, new int(fd));
  SSL_set_bio(ssl, bio, bio);  // the SSL owns it now
  return Status::Ok();
}

Status CheckTlsPeerVerified(SSL* ssl) {
  X509* cert = SSL_get_peer_certificate(ssl);
  if (cert == nullptr) return UnauthenticatedError("the TLS server presented no certificate");
  X509_free(cert);
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) {
    return UnauthenticatedError(std::string("the server's certificate is not trusted: ") +
                                X509_verify_cert_error_string(verify));
  }
  return Status::Ok();
}

}  // namespace kvtier
