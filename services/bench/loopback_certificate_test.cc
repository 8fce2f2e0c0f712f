#include "services/bench/loopback_certificate.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "common/tls_context.h"
#include "tests/testing/test_util.h"

namespace kvtier::bench {
namespace {

// A TLS handshake over a socket pair: the server presents the certificate, the client
// trusts it as its CA and expects `name`. Returns the client's verdict.
Status Handshake(const LoopbackCertificate& cert, const std::string& name) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return InternalError("socketpair");
  Result<TlsContextPtr> server = MakeTlsServerContext(cert.cert_file, cert.key_file);
  Result<TlsContextPtr> client = MakeTlsClientContext(cert.cert_file);
  if (!server.ok()) return server.status();
  if (!client.ok()) return client.status();
  SSL* accept = SSL_new(server->get());
  SSL* connect = SSL_new(client->get());
  Status status = AttachTlsSocket(accept, fds[0]);
  if (status.ok()) status = AttachTlsSocket(connect, fds[1]);
  if (status.ok()) status = ExpectTlsServerName(connect, name);
  if (status.ok()) {
    std::thread serving([&] { (void)SSL_accept(accept); });
    const bool connected = SSL_connect(connect) == 1;
    if (!connected) ::shutdown(fds[1], SHUT_RDWR);  // the server's accept gives up too
    serving.join();
    status = connected ? CheckTlsPeerVerified(connect)
                       : UnauthenticatedError("handshake failed: " + TlsErrors());
  }
  SSL_free(accept);
  SSL_free(connect);
  close(fds[0]);
  close(fds[1]);
  return status;
}

TEST(LoopbackCertificateTest, ServesTlsThatVerifiesForLoopbackOnly) {
  testing::TempDir dir;
  Result<LoopbackCertificate> cert = WriteLoopbackCertificate(dir.path());
  ASSERT_TRUE(cert.ok()) << cert.status();
  EXPECT_EQ(cert->server_name, "127.0.0.1");
  EXPECT_TRUE(Handshake(*cert, "127.0.0.1").ok()) << Handshake(*cert, "127.0.0.1");
  EXPECT_TRUE(Handshake(*cert, "localhost").ok());
  const Status other = Handshake(*cert, "kvtier.test");
  EXPECT_EQ(other.code(), StatusCode::kUnauthenticated) << other;
  // Each call makes a key of its own.
  testing::TempDir second;
  Result<LoopbackCertificate> again = WriteLoopbackCertificate(second.path());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(Handshake(LoopbackCertificate{cert->cert_file, again->key_file}, "127.0.0.1").ok())
      << "a certificate with another's key";
}

TEST(LoopbackCertificateTest, AnUnwritableDirectoryIsNamed) {
  const Status status = WriteLoopbackCertificate("/nonexistent-kvtier-dir").status();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("/nonexistent-kvtier-dir/bench-key.pem"), std::string::npos)
      << status;
}

}  // namespace
}  // namespace kvtier::bench
