// StreamSocket: a data stream connection's byte path, plaintext or TLS, on the stream's
// event loop. Plaintext goes through Asio's composed reads and writes; TLS through
// OpenSSL on the socket's descriptor (non-blocking, read-ahead on, partial writes),
// waiting for readiness on the loop when OpenSSL asks to read or write. Internal to
// services/store/stream.
//
// Why not asio::ssl::stream: it hands OpenSSL one buffer of a gather at a time and moves
// every record through its own buffers and a socket operation of its own; here a reply's
// small pieces are coalesced into one record and each large payload goes to SSL_write
// whole, which writes record after record to the socket in one call.
//
// ReadAll / WriteAll move every byte of their buffers, then call the handler with
// (error, bytes) as asio::async_read/async_write do (asio::error::eof for a peer that
// closed); never from inside the call itself. At most one read and one write at a time.
// The buffers must stay valid until the handler runs. Handshake (TLS only: a plaintext
// socket completes at once) runs the server's side.
//
// Thread safety: every method runs on the socket's loop. Ownership: owns the socket and
// its SSL; the SSL_CTX must outlive it.
#pragma once

#include <openssl/types.h>

#include <functional>
#include <limits>
#include <vector>

#include <asio.hpp>

namespace kvtier::store {

// Completion condition for a transfer's payload: the whole remainder in each system call.
// asio's transfer_all() hands the kernel at most 64 KiB per call (default_max_transfer_size),
// so a 1 MiB get took 16 sendmsg calls, each with its own socket lock, wake-up and return
// through the loop.
inline std::size_t WholeRemainder(const asio::error_code& ec, std::size_t /*transferred*/) {
  return ec ? 0 : std::numeric_limits<std::size_t>::max();
}

class StreamSocket {
 public:
  using Handler = std::function<void(const asio::error_code&, size_t)>;

  // `tls` null: plaintext. REQUIRES: `socket` is open.
  StreamSocket(asio::ip::tcp::socket socket, SSL_CTX* tls);
  ~StreamSocket();
  StreamSocket(const StreamSocket&) = delete;
  StreamSocket& operator=(const StreamSocket&) = delete;

  bool encrypted() const { return ssl_ != nullptr; }
  asio::ip::tcp::socket& tcp() { return socket_; }
  const asio::ip::tcp::socket& tcp() const { return socket_; }
  asio::any_io_executor get_executor() { return socket_.get_executor(); }

  void Handshake(std::function<void(const asio::error_code&)> done);

  // Plaintext hands `handler` to Asio as it is (no allocation of its own); TLS keeps it
  // in a Handler.
  template <typename Buffers, typename H>
  void ReadAll(const Buffers& buffers, H&& handler) {
    if (ssl_ == nullptr)
      return asio::async_read(socket_, buffers, WholeRemainder, std::forward<H>(handler));
    Load(read_, buffers);
    Step(Op::kRead, Handler(std::forward<H>(handler)), /*inline_call=*/true);
  }
  template <typename Buffers, typename H>
  void WriteAll(const Buffers& buffers, H&& handler) {
    if (ssl_ == nullptr)
      return asio::async_write(socket_, buffers, WholeRemainder, std::forward<H>(handler));
    LoadCoalesced(buffers);
    Step(Op::kWrite, Handler(std::forward<H>(handler)), /*inline_call=*/true);
  }
  // Reads the raw socket (ciphertext under TLS) to discard what a client still sends.
  void DiscardSome(asio::mutable_buffer into, Handler handler);
  // Ends the sending side (a TLS close_notify first, best effort).
  void ShutdownSend();
  void Close();

 private:
  enum class Op { kHandshake, kRead, kWrite };
  struct Piece {
    uint8_t* data;
    size_t size;
  };
  struct Pieces {
    std::vector<Piece> pieces;
    size_t at = 0, offset = 0, moved = 0;
  };
  template <typename Buffers>
  static void Load(Pieces& into, const Buffers& buffers) {
    into = Pieces{std::move(into.pieces)};
    into.pieces.clear();
    for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers);
         ++it) {
      const asio::const_buffer buffer(*it);
      if (buffer.size() > 0)
        into.pieces.push_back(
            {static_cast<uint8_t*>(const_cast<void*>(buffer.data())), buffer.size()});
    }
  }
  // Runs of small buffers are copied into `coalesced_`, so that they go out as one record.
  template <typename Buffers>
  void LoadCoalesced(const Buffers& buffers) {
    Load(gathered_, buffers);
    Coalesce();
  }
  void Coalesce();
  // Drives `op` until done, an error, or OpenSSL waits for the socket (then again from
  // the wait's completion). `inline_call`: called from ReadAll/WriteAll/Handshake, so a
  // completion is posted rather than run.
  void Step(Op op, Handler handler, bool inline_call);
  void Complete(Handler handler, const asio::error_code& ec, size_t bytes, bool inline_call);

  asio::ip::tcp::socket socket_;
  SSL* ssl_ = nullptr;
  Pieces read_, write_, gathered_;
  std::vector<uint8_t> coalesced_;
};

}  // namespace kvtier::store
