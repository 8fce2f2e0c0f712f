// DataStreamClient: one connection to a node's data stream (protocol.h), carrying the
// transfers that BlockStore.openGet/openPut tickets name, and the keyed gets and puts of
// its get and put sessions, one at a time; keyed gets may also be pipelined, the next
// one's keys sent before the current one's reply is read (SendGetKeys, ReceiveGetKeys).
//
// Get reads each block's payload straight from the socket into the caller's buffer
// (scatter, readv); Put writes the caller's payloads straight to the socket (gather,
// writev): no staging copy and no allocation per block on this side. Checksums are the
// caller's to verify against the headers that came with the ticket. Each keyed get acks
// the keyed replies read before it (protocol.h), which lets a node send to a node's
// session zero copy.
//
// Why plain POSIX sockets rather than Asio here: a caller's thread blocks on its
// transfer, with a deadline, and readv/writev with SO_RCVTIMEO/SO_SNDTIMEO say exactly
// that; the server side, which multiplexes connections, runs on Asio.
//
// With TLS (DataStreamClientOptions::tls) the same calls run over OpenSSL on the socket:
// each payload goes to SSL_write or comes from SSL_read whole, small pieces coalesced.
//
// Errors: a refusal from the node comes back with the node's code and message (the
// connection is then closed by the node); kUnavailable for a connection that failed or
// timed out (kUnauthenticated for a server whose certificate does not verify), kInternal for a
// reply that breaks the protocol. After any error the client is broken(): make a new one.
//
// Thread safety: not thread-safe; one caller at a time. Owns its socket.
#pragma once

#include <sys/uio.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tls_context.h"
#include "common/block_key.h"
#include "services/store/stream/protocol.h"
#include "storage/block_header.h"

namespace kvtier::store {

struct DataStreamClientOptions {
  std::string address = {};  // "host:port" or "[v6]:port" (a ticket's data_address)
  std::chrono::milliseconds timeout{10'000};  // connect, and each wait for bytes
  // Set (common/tls_context.h, a client context): TLS to a node whose stream runs TLS,
  // its certificate verified for `tls_server_name` (default: the address's host, a name
  // or an IP address).
  TlsContextPtr tls = nullptr;
  std::string tls_server_name = {};
};

class DataStreamClient {
 public:
  [[nodiscard]] static Result<std::unique_ptr<DataStreamClient>> Connect(
      const DataStreamClientOptions& options);
  // Acks the replies it read (AckReplies, best effort) unless gets await their replies,
  // then closes the connection.
  ~DataStreamClient();
  DataStreamClient(const DataStreamClient&) = delete;
  DataStreamClient& operator=(const DataStreamClient&) = delete;

  // The ticket's blocks: outs[i] receives block i's payload and must have exactly the
  // payload size its header gave (empty for a block absent at open). Returns each
  // block's state; the bytes of a block not kPresent are left as they were.
  [[nodiscard]] Result<std::vector<StreamBlockState>> Get(const TransferTicket& ticket,
                                                          std::span<const std::span<uint8_t>> outs);
  // A keyed get under a get session (protocol.h): `buffer_for(i, header)` is called for
  // each present block, in order, and answers where its payload goes (exactly
  // header.payload_bytes). Returns each key's state and, for a present block, the header
  // of the bytes received; checksums are the caller's to verify.
  // REQUIRES: 1 to kMaxStreamKeys keys.
  struct KeyedGet {
    std::vector<StreamBlockState> states;
    std::vector<std::optional<storage::BlockHeader>> headers;
  };
  using BufferFor = std::function<std::span<uint8_t>(size_t i, const storage::BlockHeader& header)>;
  [[nodiscard]] Result<KeyedGet> GetKeys(const TransferTicket& session,
                                         std::span<const BlockKey> keys,
                                         const BufferFor& buffer_for);
  // GetKeys in two halves, for pipelining: SendGetKeys sends a keyed get's keys without
  // waiting; ReceiveGetKeys reads the reply of the oldest get sent and not yet received
  // (the node answers in order, reading the next request once it has sent a reply). So a
  // client can keep the node busy across its own round trip. At most kMaxGetsInFlight are
  // sent ahead: a waiting request sits in the node's socket buffer, which holds one (at
  // most 64 KiB of keys). kFailedPrecondition, with nothing sent and the connection kept,
  // for a send past that limit, a receive with none in flight, and any other transfer
  // (Get, Put, PutBlocks) while gets are in flight; kInvalidArgument, likewise, for a send
  // of no keys or of more than kMaxStreamKeys.
  static constexpr size_t kMaxGetsInFlight = 2;
  [[nodiscard]] Status SendGetKeys(const TransferTicket& session, std::span<const BlockKey> keys);
  [[nodiscard]] Result<KeyedGet> ReceiveGetKeys(const BufferFor& buffer_for);
  // Says which keyed replies it has read whole, when it has read some since it last said
  // (a keyed get says it too): for a caller about to leave the connection idle, so that
  // the node unpins the pages it lent at once (protocol.h, kAck). kFailedPrecondition,
  // with nothing sent, while keyed gets await their replies.
  [[nodiscard]] Status AckReplies();
  size_t gets_in_flight() const { return gets_in_flight_; }
  // The payloads in the order of the headers given to openPut; returns blocks stored.
  // REQUIRES: the payloads' sizes add up to ticket.total_bytes.
  [[nodiscard]] Result<uint32_t> Put(const TransferTicket& ticket,
                                     std::span<const std::span<const uint8_t>> payloads);
  // A keyed put under a put session (protocol.h): the headers travel on the stream before
  // the payloads (payloads[i] is block i's, exactly headers[i].payload_bytes; checksums
  // are the caller's to set). Returns blocks stored. kInvalidArgument, with nothing sent
  // and the connection kept, for headers and payloads that do not match.
  // REQUIRES: 1 to kMaxStreamKeys blocks.
  [[nodiscard]] Result<uint32_t> PutBlocks(const TransferTicket& session,
                                           std::span<const storage::BlockHeader> headers,
                                           std::span<const std::span<const uint8_t>> payloads);

  const std::string& address() const { return address_; }
  bool broken() const { return fd_ < 0; }

 private:
  DataStreamClient(int fd, SSL* ssl, std::string address)
      : fd_(fd), ssl_(ssl), address_(std::move(address)) {}
  // Handshakes on a connected socket and verifies the server.
  [[nodiscard]] static Result<SSL*> StartTls(int fd, const DataStreamClientOptions& options);
  // Every byte of `iov` (consumed as it goes), in or out; false with errno set.
  bool ReadFully(std::vector<iovec>& iov);
  bool WriteFully(std::vector<iovec>& iov);
  // A failed SSL call's reason as errno (ECONNRESET, ETIMEDOUT, EPROTO); false.
  bool TlsFailed(int rc);
  void CloseConnection();
  // The reply head; a refusal (its message read) as the node's status.
  [[nodiscard]] Result<StreamReply> ReadReply();
  // A keyed get's states and headers, after its reply head.
  [[nodiscard]] Result<KeyedGet> ReadStatesAndHeaders(const StreamReply& reply, size_t keys);
  // Sends `iov` (a put's request) and the payloads, then reads the reply.
  [[nodiscard]] Result<uint32_t> SendPut(std::vector<iovec> iov,
                                         std::span<const std::span<const uint8_t>> payloads);
  [[nodiscard]] Status Fail(Status status);
  // kUnavailable when broken; CheckIdle also kFailedPrecondition while pipelined gets
  // await their replies.
  [[nodiscard]] Status CheckOpen() const;
  [[nodiscard]] Status CheckIdle() const;

  int fd_ = -1;
  SSL* ssl_ = nullptr;  // TLS: owned, over fd_
  std::string address_;
  std::vector<uint8_t> coalesced_;  // TLS: a write's small pieces, reused
  std::string encoded_;             // a keyed put's headers, reused
  // Pipelined keyed gets sent and not yet received: their key counts, oldest first, in a
  // ring (no allocation per get).
  std::array<uint32_t, kMaxGetsInFlight> keys_in_flight_ = {};
  size_t oldest_in_flight_ = 0;
  size_t gets_in_flight_ = 0;
  uint32_t keyed_replies_read_ = 0;   // whole, on this connection: acked in the next keyed get
  uint32_t keyed_replies_acked_ = 0;  // the count last said
};

}  // namespace kvtier::store
