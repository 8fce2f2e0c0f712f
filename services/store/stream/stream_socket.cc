#include "services/store/stream/stream_socket.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cerrno>
#include <cstring>

#include "common/tls_context.h"

namespace kvtier::store {
namespace {

// Buffers smaller than this are copied together into one record; larger ones are handed
// to SSL_write whole.
constexpr size_t kCoalesceBelow = size_t{16} * 1024;
// OpenSSL's read-ahead buffer: up to this much ciphertext per read from the socket.
constexpr size_t kReadAheadBytes = size_t{64} * 1024;

}  // namespace

StreamSocket::StreamSocket(asio::ip::tcp::socket socket, SSL_CTX* tls)
    : socket_(std::move(socket)) {
  if (tls == nullptr) return;
  ssl_ = SSL_new(tls);
  asio::error_code ec;
  socket_.native_non_blocking(true, ec);
  if (ssl_ == nullptr || ec || !AttachTlsSocket(ssl_, socket_.native_handle()).ok()) {
    socket_.close(ec);  // every operation then fails, and the connection closes
    return;
  }
  SSL_set_accept_state(ssl_);
  SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_RELEASE_BUFFERS);
  // The protocol frames every transfer; a peer gone without close_notify is a plain eof.
  SSL_set_options(ssl_, SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_set_read_ahead(ssl_, 1);
  SSL_set_default_read_buffer_len(ssl_, kReadAheadBytes);
}

StreamSocket::~StreamSocket() {
  if (ssl_ != nullptr) SSL_free(ssl_);
}

void StreamSocket::Handshake(std::function<void(const asio::error_code&)> done) {
  Handler handler = [done = std::move(done)](const asio::error_code& ec, size_t) { done(ec); };
  if (ssl_ == nullptr) return Complete(std::move(handler), {}, 0, /*inline_call=*/true);
  Step(Op::kHandshake, std::move(handler), /*inline_call=*/true);
}

void StreamSocket::Coalesce() {
  size_t small = 0;
  for (const Piece& piece : gathered_.pieces)
    if (piece.size < kCoalesceBelow) small += piece.size;
  coalesced_.resize(small);
  write_ = Pieces{std::move(write_.pieces)};
  write_.pieces.clear();
  size_t used = 0;
  bool in_run = false;
  for (const Piece& piece : gathered_.pieces) {
    if (piece.size >= kCoalesceBelow) {
      write_.pieces.push_back(piece);
      in_run = false;
      continue;
    }
    std::memcpy(coalesced_.data() + used, piece.data, piece.size);
    if (in_run) {
      write_.pieces.back().size += piece.size;
    } else {
      write_.pieces.push_back({coalesced_.data() + used, piece.size});
    }
    used += piece.size;
    in_run = true;
  }
}

void StreamSocket::Step(Op op, Handler handler, bool inline_call) {
  Pieces& pieces = op == Op::kRead ? read_ : write_;
  // Closed (a timer cut the connection off): its descriptor may be another's by now.
  if (!socket_.is_open()) {
    return Complete(std::move(handler), asio::error::bad_descriptor, 0, inline_call);
  }
  for (;;) {
    ERR_clear_error();
    int rc = 0;
    if (op == Op::kHandshake) {
      rc = SSL_do_handshake(ssl_);
      if (rc == 1) return Complete(std::move(handler), {}, 0, inline_call);
    } else {
      if (pieces.at == pieces.pieces.size())
        return Complete(std::move(handler), {}, pieces.moved, inline_call);
      const Piece& piece = pieces.pieces[pieces.at];
      uint8_t* data = piece.data + pieces.offset;
      const size_t left = piece.size - pieces.offset;
      size_t n = 0;
      rc = op == Op::kRead ? SSL_read_ex(ssl_, data, left, &n) : SSL_write_ex(ssl_, data, left, &n);
      if (rc == 1) {
        pieces.moved += n;
        pieces.offset += n;
        if (pieces.offset == piece.size) {
          ++pieces.at;
          pieces.offset = 0;
        }
        continue;
      }
    }
    const int error = SSL_get_error(ssl_, rc);
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      const auto wait = error == SSL_ERROR_WANT_READ ? asio::socket_base::wait_read
                                                     : asio::socket_base::wait_write;
      socket_.async_wait(wait, [this, op,
                                handler = std::move(handler)](const asio::error_code& ec) mutable {
        if (!ec) return Step(op, std::move(handler), /*inline_call=*/false);
        const size_t moved = op == Op::kRead ? read_.moved : op == Op::kWrite ? write_.moved : 0;
        Complete(std::move(handler), ec, moved, /*inline_call=*/false);
      });
      return;
    }
    const bool closed =
        error == SSL_ERROR_ZERO_RETURN || (error == SSL_ERROR_SYSCALL && errno == 0);
    ERR_clear_error();
    return Complete(
        std::move(handler),
        closed ? asio::error::eof : asio::error::make_error_code(asio::error::connection_reset),
        op == Op::kHandshake ? 0 : pieces.moved, inline_call);
  }
}

void StreamSocket::Complete(Handler handler, const asio::error_code& ec, size_t bytes,
                            bool inline_call) {
  if (!inline_call) return handler(ec, bytes);
  asio::post(socket_.get_executor(),
             [handler = std::move(handler), ec, bytes] { handler(ec, bytes); });
}

void StreamSocket::DiscardSome(asio::mutable_buffer into, Handler handler) {
  socket_.async_read_some(into, std::move(handler));
}

void StreamSocket::ShutdownSend() {
  if (ssl_ != nullptr && SSL_is_init_finished(ssl_)) {
    ERR_clear_error();
    SSL_shutdown(ssl_);  // queues and tries to send close_notify; not awaited
    ERR_clear_error();
  }
  asio::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
}

void StreamSocket::Close() {
  asio::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

}  // namespace kvtier::store
