// DataStreamClient: one connection to a node's data stream (protocol.h), carrying the
// transfers that BlockStore.openGet/openPut tickets name, one at a time.
//
// Get reads each block's payload straight from the socket into the caller's buffer
// (scatter, readv); Put writes the caller's payloads straight to the socket (gather,
// writev): no staging copy and no allocation per block on this side. Checksums are the
// caller's to verify against the headers that came with the ticket.
//
// Why plain POSIX sockets rather than Asio here: a caller's thread blocks on its
// transfer, with a deadline, and readv/writev with SO_RCVTIMEO/SO_SNDTIMEO say exactly
// that; the server side, which multiplexes connections, runs on Asio.
//
// Errors: a refusal from the node comes back with the node's code and message (the
// connection is then closed by the node); kUnavailable for a connection that failed or
// timed out, kInternal for a reply that breaks the protocol. After any error the client
// is broken(): make a new one.
//
// Thread safety: not thread-safe; one transfer at a time. Owns its socket.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/store/stream/protocol.h"

namespace kvtier::store {

struct DataStreamClientOptions {
  std::string address;  // "host:port" or "[v6]:port" (a ticket's data_address)
  std::chrono::milliseconds timeout{10'000};  // connect, and each wait for bytes
};

class DataStreamClient {
 public:
  [[nodiscard]] static Result<std::unique_ptr<DataStreamClient>> Connect(const DataStreamClientOptions& options);
  ~DataStreamClient();
  DataStreamClient(const DataStreamClient&) = delete;
  DataStreamClient& operator=(const DataStreamClient&) = delete;

  // The ticket's blocks: outs[i] receives block i's payload and must have exactly the
  // payload size its header gave (empty for a block absent at open). Returns each
  // block's state; the bytes of a block not kPresent are left as they were.
  [[nodiscard]] Result<std::vector<StreamBlockState>> Get(const TransferTicket& ticket,
                                                          std::span<const std::span<uint8_t>> outs);
  // The payloads in the order of the headers given to openPut; returns blocks stored.
  // REQUIRES: the payloads' sizes add up to ticket.total_bytes.
  [[nodiscard]] Result<uint32_t> Put(const TransferTicket& ticket, std::span<const std::span<const uint8_t>> payloads);

  const std::string& address() const { return address_; }
  bool broken() const { return fd_ < 0; }

 private:
  DataStreamClient(int fd, std::string address) : fd_(fd), address_(std::move(address)) {}
  // The reply head; a refusal (its message read) as the node's status.
  [[nodiscard]] Result<StreamReply> ReadReply();
  [[nodiscard]] Status Fail(Status status);

  int fd_ = -1;
  std::string address_;
};

}  // namespace kvtier::store
