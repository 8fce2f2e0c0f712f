#include "services/rpc/tls_client_stream.h"

#include <kj/debug.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <climits>

#include "common/tls_context.h"
#include "services/rpc/status_mapping.h"

namespace kvtier::rpc {
namespace {

// Records are encrypted into memory and sent in pieces of about this many bytes, so that a
// large message never needs a second copy of itself in ciphertext.
constexpr size_t kWriteChunk = size_t{256} * 1024;
// One read from the peer takes at most this much ciphertext (a TLS record is at most 16 KiB
// plus its overhead).
constexpr size_t kReadChunk = size_t{64} * 1024;

// A failure as the exception that carries its Status (services/rpc/status_mapping.h), so
// the caller learns whether to retry: a certificate that does not verify is
// UNAUTHENTICATED (configuration), a broken connection UNAVAILABLE.
kj::Exception Failed(const Status& status) { return StatusToException(status); }

class TlsClientStream final : public kj::AsyncIoStream {
 public:
  TlsClientStream(SSL* ssl, kj::Own<kj::AsyncIoStream> inner)
      : ssl_(ssl), inner_(kj::mv(inner)), incoming_(kj::heapArray<kj::byte>(kReadChunk)) {
    in_ = BIO_new(BIO_s_mem());
    out_ = BIO_new(BIO_s_mem());
    KJ_REQUIRE(in_ != nullptr && out_ != nullptr, "no memory for TLS buffers");
    SSL_set_bio(ssl_, in_, out_);  // the SSL owns both now
    SSL_set_connect_state(ssl_);
  }
  ~TlsClientStream() noexcept(false) { SSL_free(ssl_); }

  kj::Promise<void> Handshake() {
    ERR_clear_error();
    const int result = SSL_do_handshake(ssl_);
    if (result == 1) return Flush().then([this] { CheckPeer(); });
    if (SSL_get_error(ssl_, result) == SSL_ERROR_WANT_READ) {
      if (peer_closed_)
        return Failed(
            UnavailableError("the server closed the connection during the TLS handshake"));
      return Flush().then([this] { return FillFromPeer(); }).then([this] { return Handshake(); });
    }
    const long verify = SSL_get_verify_result(ssl_);
    const Status reason =
        verify != X509_V_OK
            ? UnauthenticatedError(std::string("the server's certificate is not trusted: ") +
                                   X509_verify_cert_error_string(verify))
            : UnavailableError("TLS handshake failed: " + TlsErrors());
    // The alert that tells the server why goes out before the connection is given up.
    return Flush().then([reason]() -> kj::Promise<void> { return Failed(reason); },
                        [reason](kj::Exception&&) -> kj::Promise<void> { return Failed(reason); });
  }

  kj::Promise<size_t> tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override {
    return ReadFrom(static_cast<kj::byte*>(buffer), min_bytes, max_bytes, 0);
  }

  kj::Promise<void> write(const void* buffer, size_t size) override {
    const kj::ArrayPtr<const kj::byte> piece(static_cast<const kj::byte*>(buffer), size);
    return WriteFrom(kj::heapArray(&piece, 1), 0, 0);
  }
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override {
    return WriteFrom(kj::heapArray(pieces), 0, 0);
  }
  kj::Promise<void> whenWriteDisconnected() override { return inner_->whenWriteDisconnected(); }
  void shutdownWrite() override {
    ERR_clear_error();
    SSL_shutdown(ssl_);  // queues close_notify; the peer's answer is not awaited
    shutdown_ =
        Flush().then([this] { inner_->shutdownWrite(); }).eagerlyEvaluate([](kj::Exception&& e) {
          KJ_LOG(WARNING, "TLS shutdown failed", e);
        });
  }
  void abortRead() override { inner_->abortRead(); }
  void getsockopt(int level, int option, void* value, kj::uint* length) override {
    inner_->getsockopt(level, option, value, length);
  }
  void setsockopt(int level, int option, const void* value, kj::uint length) override {
    inner_->setsockopt(level, option, value, length);
  }
  void getsockname(struct sockaddr* addr, kj::uint* length) override {
    inner_->getsockname(addr, length);
  }
  void getpeername(struct sockaddr* addr, kj::uint* length) override {
    inner_->getpeername(addr, length);
  }

 private:
  void CheckPeer() {
    const Status verified = CheckTlsPeerVerified(ssl_);
    if (!verified.ok()) kj::throwFatalException(Failed(verified));
  }

  // Reads plaintext until `min_bytes` are in, the peer closed, or an error.
  kj::Promise<size_t> ReadFrom(kj::byte* buffer, size_t min_bytes, size_t max_bytes, size_t done) {
    while (done < max_bytes) {
      ERR_clear_error();
      const int n = SSL_read(ssl_, buffer + done,
                             static_cast<int>(std::min<size_t>(max_bytes - done, INT_MAX)));
      if (n > 0) {
        done += static_cast<size_t>(n);
        if (done >= min_bytes) return done;
        continue;
      }
      const int error = SSL_get_error(ssl_, n);
      if (error == SSL_ERROR_ZERO_RETURN) return done;  // close_notify
      if (error != SSL_ERROR_WANT_READ)
        return Failed(UnavailableError("TLS read failed: " + TlsErrors()));
      if (peer_closed_) return done;
      QueueOutput();  // a post-handshake message (a key update) may want an answer
      return FillFromPeer().then([this, buffer, min_bytes, max_bytes, done] {
        return ReadFrom(buffer, min_bytes, max_bytes, done);
      });
    }
    return done;
  }

  // One read of ciphertext from the peer into the SSL's input.
  kj::Promise<void> FillFromPeer() {
    return inner_->tryRead(incoming_.begin(), 1, incoming_.size()).then([this](size_t n) {
      if (n == 0) {
        peer_closed_ = true;
        return;
      }
      KJ_REQUIRE(BIO_write(in_, incoming_.begin(), static_cast<int>(n)) == static_cast<int>(n),
                 "TLS input lost");
    });
  }

  // Encrypts `pieces` from (`index`, `offset`) on, sending every kWriteChunk bytes.
  kj::Promise<void> WriteFrom(kj::Array<kj::ArrayPtr<const kj::byte>> pieces, size_t index,
                              size_t offset) {
    size_t queued = 0;
    while (index < pieces.size()) {
      const kj::ArrayPtr<const kj::byte> piece = pieces[index];
      const size_t chunk = std::min(piece.size() - offset, kWriteChunk);
      if (chunk > 0) {
        ERR_clear_error();
        const int n = SSL_write(ssl_, piece.begin() + offset, static_cast<int>(chunk));
        if (n <= 0) return Failed(UnavailableError("TLS write failed: " + TlsErrors()));
        offset += static_cast<size_t>(n);
        queued += static_cast<size_t>(n);
      }
      if (offset == piece.size()) {
        ++index;
        offset = 0;
      }
      if (queued >= kWriteChunk) {
        return Flush().then([this, pieces = kj::mv(pieces), index, offset]() mutable {
          return WriteFrom(kj::mv(pieces), index, offset);
        });
      }
    }
    return Flush();
  }

  // Moves the SSL's pending output behind the writes already on their way.
  void QueueOutput() {
    const size_t pending = BIO_ctrl_pending(out_);
    if (pending == 0) return;
    auto bytes = kj::heapArray<kj::byte>(pending);
    KJ_REQUIRE(
        BIO_read(out_, bytes.begin(), static_cast<int>(pending)) == static_cast<int>(pending),
        "TLS output lost");
    writes_ = writes_.addBranch()
                  .then([this, bytes = kj::mv(bytes)]() mutable {
                    auto written = inner_->write(bytes.begin(), bytes.size());
                    return written.attach(kj::mv(bytes));
                  })
                  .fork();
  }
  // Resolves when everything queued so far is written.
  kj::Promise<void> Flush() {
    QueueOutput();
    return writes_.addBranch();
  }

  SSL* ssl_;
  BIO* in_ = nullptr;   // owned by ssl_
  BIO* out_ = nullptr;  // owned by ssl_
  kj::Own<kj::AsyncIoStream> inner_;
  kj::Array<kj::byte> incoming_;
  bool peer_closed_ = false;
  kj::ForkedPromise<void> writes_ =
      kj::Promise<void>(kj::READY_NOW).fork();  // the last queued write
  kj::Maybe<kj::Promise<void>> shutdown_;
};

}  // namespace

kj::Promise<kj::Own<kj::AsyncIoStream>> ConnectTls(SSL_CTX& context,
                                                   kj::Own<kj::AsyncIoStream> inner,
                                                   const std::string& server_name) {
  if (server_name.empty())
    return Failed(InvalidArgumentError("TLS needs the name the server's certificate must carry"));
  ERR_clear_error();
  SSL* ssl = SSL_new(&context);
  if (ssl == nullptr) return Failed(InternalError("cannot start a TLS connection: " + TlsErrors()));
  if (const Status named = ExpectTlsServerName(ssl, server_name); !named.ok()) {
    SSL_free(ssl);
    return Failed(named);
  }
  auto stream = kj::heap<TlsClientStream>(ssl, kj::mv(inner));
  auto handshake = stream->Handshake();
  return handshake.then(
      [stream = kj::mv(stream)]() mutable -> kj::Own<kj::AsyncIoStream> { return kj::mv(stream); });
}

}  // namespace kvtier::rpc
