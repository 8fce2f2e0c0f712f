#include "services/store/stream/data_stream_client.h"

#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "common/iovec.h"

namespace kvtier::store {
namespace {

// As the server's end (stream_socket.cc): small pieces coalesced, a 64 KiB read-ahead.
constexpr size_t kTlsCoalesceBelow = size_t{16} * 1024;
constexpr size_t kTlsReadAheadBytes = size_t{64} * 1024;

Status IoError(const std::string& what, const std::string& address) {
  return UnavailableError("data stream " + address + ": " + what + ": " + std::strerror(errno));
}

Result<int> ConnectTo(const std::string& address, std::chrono::milliseconds timeout) {
  const std::optional<HostPort> host_port = SplitHostPort(address);
  if (!host_port)
    return InvalidArgumentError("data stream address \"" + address + "\" is not host:port");
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host_port->host.c_str(), host_port->port.c_str(), &hints, &found);
      rc != 0) {
    return UnavailableError("data stream " + address + ": " + gai_strerror(rc));
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int rc = fd < 0 ? -1 : connect(fd, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  if (fd < 0) return IoError("socket", address);
  if (rc != 0 && errno == EINPROGRESS) {  // connect with a deadline
    pollfd p{fd, POLLOUT, 0};
    rc = poll(&p, 1, static_cast<int>(timeout.count()));
    int error = rc == 1 ? 0 : ETIMEDOUT;
    socklen_t len = sizeof(error);
    if (rc == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
    errno = error;
    rc = error == 0 ? 0 : -1;
  }
  if (rc != 0) {
    const Status status = IoError("connect", address);
    close(fd);
    return status;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const timeval tv{static_cast<time_t>(timeout.count() / 1000),
                   static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// Moves every byte of `iov` (consumed as it goes), IOV_MAX buffers per call.
template <typename Syscall>
bool MoveFully(int fd, std::vector<iovec>& iov, Syscall syscall) {
  size_t first = 0;
  while (first < iov.size()) {
    const int count = static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
    const ssize_t n = syscall(fd, iov.data() + first, count);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ECONNRESET;  // the node closed the connection
      return false;
    }
    first = ConsumeIovecs(iov, first, static_cast<size_t>(n));
  }
  return true;
}

bool PlainRead(int fd, std::vector<iovec>& iov) { return MoveFully(fd, iov, ::readv); }
bool PlainWrite(int fd, std::vector<iovec>& iov) {
  // sendmsg with MSG_NOSIGNAL: a node that closed the connection must not raise SIGPIPE.
  return MoveFully(fd, iov, [](int s, const iovec* v, int count) {
    msghdr message{};
    message.msg_iov = const_cast<iovec*>(v);
    message.msg_iovlen = static_cast<size_t>(count);
    return ::sendmsg(s, &message, MSG_NOSIGNAL);
  });
}

iovec Iov(const void* data, size_t size) { return {const_cast<void*>(data), size}; }

}  // namespace

Result<std::unique_ptr<DataStreamClient>> DataStreamClient::Connect(
    const DataStreamClientOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(const int fd, ConnectTo(options.address, options.timeout));
  SSL* ssl = nullptr;
  if (options.tls != nullptr) {
    Result<SSL*> opened = StartTls(fd, options);
    if (!opened.ok()) {
      close(fd);
      return opened.status();
    }
    ssl = *opened;
  }
  return std::unique_ptr<DataStreamClient>(new DataStreamClient(fd, ssl, options.address));
}

Result<SSL*> DataStreamClient::StartTls(int fd, const DataStreamClientOptions& options) {
  std::string name = options.tls_server_name;
  if (name.empty()) {
    const std::optional<HostPort> host_port = SplitHostPort(options.address);
    if (host_port) name = host_port->host;
  }
  ERR_clear_error();
  SSL* ssl = SSL_new(options.tls.get());
  if (ssl == nullptr) return InternalError("cannot start a TLS connection: " + TlsErrors());
  Status named = ExpectTlsServerName(ssl, name);
  if (named.ok()) named = AttachTlsSocket(ssl, fd);
  if (!named.ok()) {
    SSL_free(ssl);
    return named;
  }
  SSL_set_read_ahead(ssl, 1);
  SSL_set_default_read_buffer_len(ssl, kTlsReadAheadBytes);
  SSL_set_options(ssl, SSL_OP_IGNORE_UNEXPECTED_EOF);
  ERR_clear_error();
  if (SSL_connect(ssl) != 1) {
    const long verify = SSL_get_verify_result(ssl);
    const Status failed =
        verify != X509_V_OK
            ? UnauthenticatedError("data stream " + options.address +
                                   ": the server's certificate is not trusted for \"" + name +
                                   "\": " + X509_verify_cert_error_string(verify))
            : UnavailableError("data stream " + options.address +
                               ": TLS handshake failed: " + TlsErrors());
    SSL_free(ssl);
    return failed;
  }
  if (Status verified = CheckTlsPeerVerified(ssl); !verified.ok()) {
    SSL_free(ssl);
    return Status(verified.code(), "data stream " + options.address + ": " + verified.message());
  }
  return ssl;
}

bool DataStreamClient::ReadFully(std::vector<iovec>& iov) {
  if (ssl_ == nullptr) return PlainRead(fd_, iov);
  for (const iovec& piece : iov) {
    auto* data = static_cast<uint8_t*>(piece.iov_base);
    for (size_t done = 0; done < piece.iov_len;) {
      size_t n = 0;
      ERR_clear_error();
      const int rc = SSL_read_ex(ssl_, data + done, piece.iov_len - done, &n);
      if (rc != 1) return TlsFailed(rc);
      done += n;
    }
  }
  return true;
}

bool DataStreamClient::WriteFully(std::vector<iovec>& iov) {
  if (ssl_ == nullptr) return PlainWrite(fd_, iov);
  // Runs of small pieces (a request's head and keys) go out together, as one record.
  auto write = [&](const uint8_t* data, size_t size) {
    size_t n = 0;
    ERR_clear_error();
    const int rc = size == 0 ? 1 : SSL_write_ex(ssl_, data, size, &n);
    return rc == 1 || TlsFailed(rc);
  };
  coalesced_.clear();
  for (const iovec& piece : iov) {
    const auto* data = static_cast<const uint8_t*>(piece.iov_base);
    if (piece.iov_len < kTlsCoalesceBelow) {
      coalesced_.insert(coalesced_.end(), data, data + piece.iov_len);
      continue;
    }
    if (!write(coalesced_.data(), coalesced_.size()) || !write(data, piece.iov_len)) return false;
    coalesced_.clear();
  }
  return write(coalesced_.data(), coalesced_.size());
}

bool DataStreamClient::TlsFailed(int rc) {
  const int error = SSL_get_error(ssl_, rc);
  if (error == SSL_ERROR_ZERO_RETURN || (error == SSL_ERROR_SYSCALL && errno == 0)) {
    errno = ECONNRESET;  // the node closed the connection
  } else if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
    errno = ETIMEDOUT;  // SO_RCVTIMEO / SO_SNDTIMEO passed
  } else if (error != SSL_ERROR_SYSCALL) {
    errno = EPROTO;
  }
  ERR_clear_error();
  return false;
}

DataStreamClient::~DataStreamClient() {
  // Best effort: the node then unpins in place the pages it lent, rather than after its
  // grace, when it would replace them.
  if (fd_ >= 0 && gets_in_flight_ == 0) (void)AckReplies();
  CloseConnection();
}

void DataStreamClient::CloseConnection() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  ssl_ = nullptr;
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Status DataStreamClient::Fail(Status status) {
  CloseConnection();
  return status;
}

Result<StreamReply> DataStreamClient::ReadReply() {
  StreamReply reply;
  std::vector<iovec> iov{Iov(&reply, sizeof(reply))};
  if (!ReadFully(iov)) return Fail(IoError("reading the reply", address_));
  if (reply.magic != kStreamMagic)
    return Fail(InternalError("data stream " + address_ + ": reply has a bad magic"));
  if (reply.code == 0) return reply;
  if (reply.message_bytes > kMaxStreamMessageBytes ||
      reply.code > static_cast<uint32_t>(StatusCode::kUnauthenticated)) {
    return Fail(InternalError("data stream " + address_ + ": malformed refusal"));
  }
  std::string message(reply.message_bytes, '\0');
  iov = {Iov(message.data(), message.size())};
  if (!ReadFully(iov)) return Fail(IoError("reading a refusal", address_));
  return Fail(
      Status(static_cast<StatusCode>(reply.code), "data stream " + address_ + ": " + message));
}

Result<std::vector<StreamBlockState>> DataStreamClient::Get(
    const TransferTicket& ticket, std::span<const std::span<uint8_t>> outs) {
  KVTIER_RETURN_IF_ERROR(CheckIdle());
  StreamRequest request{
      .op = static_cast<uint32_t>(StreamOp::kGet), .ticket_id = ticket.id, .secret = ticket.secret};
  std::vector<iovec> iov{Iov(&request, sizeof(request))};
  if (!WriteFully(iov)) return Fail(IoError("sending a get", address_));
  KVTIER_ASSIGN_OR_RETURN(const StreamReply reply, ReadReply());
  if (reply.blocks != outs.size()) {
    return Fail(InternalError("data stream " + address_ + ": " + std::to_string(reply.blocks) +
                              " blocks in the reply, " + std::to_string(outs.size()) + " asked"));
  }
  std::vector<uint8_t> states(PaddedStateBytes(reply.blocks));
  iov = {Iov(states.data(), states.size())};
  if (!ReadFully(iov)) return Fail(IoError("reading block states", address_));
  std::vector<StreamBlockState> result(outs.size());
  uint64_t expected = 0;
  iov.clear();
  for (size_t i = 0; i < outs.size(); ++i) {
    if (states[i] > static_cast<uint8_t>(StreamBlockState::kCorrupt)) {
      return Fail(InternalError("data stream " + address_ + ": unknown block state"));
    }
    result[i] = static_cast<StreamBlockState>(states[i]);
    if (result[i] != StreamBlockState::kPresent) continue;
    expected += outs[i].size();
    if (!outs[i].empty()) iov.push_back(Iov(outs[i].data(), outs[i].size()));
  }
  if (expected != reply.payload_bytes) {
    return Fail(InternalError("data stream " + address_ + ": " +
                              std::to_string(reply.payload_bytes) +
                              " payload bytes in the reply, the present blocks' headers say " +
                              std::to_string(expected)));
  }
  if (!ReadFully(iov)) return Fail(IoError("reading payloads", address_));
  return result;
}

Status DataStreamClient::CheckOpen() const {
  if (fd_ < 0)
    return UnavailableError("data stream " + address_ + ": connection broken by an earlier error");
  return Status::Ok();
}

Status DataStreamClient::CheckIdle() const {
  KVTIER_RETURN_IF_ERROR(CheckOpen());
  if (gets_in_flight_ > 0) {
    return FailedPreconditionError("data stream " + address_ + ": " +
                                   std::to_string(gets_in_flight_) +
                                   " keyed gets sent await their replies; receive them first");
  }
  return Status::Ok();
}

Result<DataStreamClient::KeyedGet> DataStreamClient::GetKeys(const TransferTicket& session,
                                                             std::span<const BlockKey> keys,
                                                             const BufferFor& buffer_for) {
  KVTIER_RETURN_IF_ERROR(CheckIdle());
  KVTIER_RETURN_IF_ERROR(SendGetKeys(session, keys));
  return ReceiveGetKeys(buffer_for);
}

Status DataStreamClient::SendGetKeys(const TransferTicket& session,
                                     std::span<const BlockKey> keys) {
  KVTIER_RETURN_IF_ERROR(CheckOpen());
  if (gets_in_flight_ == kMaxGetsInFlight) {
    return FailedPreconditionError("data stream " + address_ + ": " +
                                   std::to_string(kMaxGetsInFlight) +
                                   " keyed gets already await their replies");
  }
  if (keys.empty() || keys.size() > kMaxStreamKeys) {
    return InvalidArgumentError("a keyed get of " + std::to_string(keys.size()) +
                                " keys: it takes 1 to " + std::to_string(kMaxStreamKeys));
  }
  const StreamRequest request{.op = static_cast<uint32_t>(StreamOp::kGetKeys),
                              .ticket_id = session.id,
                              .secret = session.secret};
  // Says how many replies it has read whole, so that the node may lend it pages (protocol.h).
  const StreamKeysHead head{.count = static_cast<uint32_t>(keys.size()),
                            .acked = kStreamAcksReplies | (keyed_replies_read_ & kStreamAckedMask)};
  keyed_replies_acked_ = keyed_replies_read_;
  std::vector<iovec> iov{Iov(&request, sizeof(request)), Iov(&head, sizeof(head)),
                         Iov(keys.data(), keys.size_bytes())};
  if (!WriteFully(iov)) return Fail(IoError("sending a keyed get", address_));
  keys_in_flight_[(oldest_in_flight_ + gets_in_flight_) % kMaxGetsInFlight] =
      static_cast<uint32_t>(keys.size());
  ++gets_in_flight_;
  return Status::Ok();
}

Status DataStreamClient::AckReplies() {
  KVTIER_RETURN_IF_ERROR(CheckIdle());
  if (keyed_replies_acked_ == keyed_replies_read_) return Status::Ok();
  const StreamRequest request{
      .op = static_cast<uint32_t>(StreamOp::kAck),
      .ticket_id = kStreamAcksReplies | (keyed_replies_read_ & kStreamAckedMask)};
  std::vector<iovec> iov{Iov(&request, sizeof(request))};
  if (!WriteFully(iov)) return Fail(IoError("sending an ack", address_));
  keyed_replies_acked_ = keyed_replies_read_;
  return Status::Ok();
}

Result<DataStreamClient::KeyedGet> DataStreamClient::ReceiveGetKeys(const BufferFor& buffer_for) {
  KVTIER_RETURN_IF_ERROR(CheckOpen());
  if (gets_in_flight_ == 0) {
    return FailedPreconditionError("data stream " + address_ + ": no keyed get awaits its reply");
  }
  const size_t keys = keys_in_flight_[oldest_in_flight_];
  oldest_in_flight_ = (oldest_in_flight_ + 1) % kMaxGetsInFlight;
  --gets_in_flight_;
  KVTIER_ASSIGN_OR_RETURN(const StreamReply reply, ReadReply());
  if (reply.blocks != keys) {
    return Fail(InternalError("data stream " + address_ + ": " + std::to_string(reply.blocks) +
                              " blocks in the reply, " + std::to_string(keys) + " asked"));
  }
  KVTIER_ASSIGN_OR_RETURN(KeyedGet got, ReadStatesAndHeaders(reply, keys));
  uint64_t expected = 0;
  std::vector<iovec> iov;
  iov.reserve(keys);
  for (size_t i = 0; i < keys; ++i) {
    if (!got.headers[i]) continue;
    const std::span<uint8_t> out = buffer_for(i, *got.headers[i]);
    if (out.size() != got.headers[i]->payload_bytes) {
      return Fail(InvalidArgumentError("keyed get: the buffer for block " + std::to_string(i) +
                                       " has " + std::to_string(out.size()) +
                                       " bytes, its header says " +
                                       std::to_string(got.headers[i]->payload_bytes)));
    }
    expected += out.size();
    iov.push_back(Iov(out.data(), out.size()));
  }
  if (expected != reply.payload_bytes) {
    return Fail(
        InternalError("data stream " + address_ + ": " + std::to_string(reply.payload_bytes) +
                      " payload bytes in the reply, its headers say " + std::to_string(expected)));
  }
  if (!ReadFully(iov)) return Fail(IoError("reading payloads", address_));
  ++keyed_replies_read_;
  return got;
}

Result<DataStreamClient::KeyedGet> DataStreamClient::ReadStatesAndHeaders(const StreamReply& reply,
                                                                          size_t keys) {
  uint64_t header_bytes = 0;
  std::vector<uint8_t> states(PaddedStateBytes(reply.blocks));
  std::vector<iovec> iov{Iov(&header_bytes, sizeof(header_bytes)),
                         Iov(states.data(), states.size())};
  if (!ReadFully(iov)) return Fail(IoError("reading block states", address_));
  if (header_bytes % 8 != 0 ||
      header_bytes > keys * storage::kMaxEncodedHeaderBytes + 7) {  // + the padding
    return Fail(InternalError("data stream " + address_ + ": a header section of " +
                              std::to_string(header_bytes) + " bytes for " + std::to_string(keys) +
                              " keys"));
  }
  std::vector<uint8_t> encoded(header_bytes);
  iov = {Iov(encoded.data(), encoded.size())};
  if (header_bytes > 0 && !ReadFully(iov)) return Fail(IoError("reading block headers", address_));
  KeyedGet got{std::vector<StreamBlockState>(keys),
               std::vector<std::optional<storage::BlockHeader>>(keys)};
  size_t at = 0;
  for (size_t i = 0; i < keys; ++i) {
    if (states[i] > static_cast<uint8_t>(StreamBlockState::kCorrupt)) {
      return Fail(InternalError("data stream " + address_ + ": unknown block state"));
    }
    got.states[i] = static_cast<StreamBlockState>(states[i]);
    if (got.states[i] != StreamBlockState::kPresent) continue;
    size_t consumed = 0;
    Result<storage::BlockHeader> header =
        storage::DecodeHeader(std::span(encoded).subspan(at), consumed);
    if (!header.ok()) {
      return Fail(InternalError("data stream " + address_ + ": block " + std::to_string(i) +
                                "'s header: " + header.status().message()));
    }
    got.headers[i] = std::move(*header);
    at += consumed;
  }
  if (header_bytes - at >= 8) {
    return Fail(InternalError("data stream " + address_ + ": " + std::to_string(header_bytes - at) +
                              " header bytes left over"));
  }
  return got;
}

Result<uint32_t> DataStreamClient::Put(const TransferTicket& ticket,
                                       std::span<const std::span<const uint8_t>> payloads) {
  KVTIER_RETURN_IF_ERROR(CheckIdle());
  StreamRequest request{
      .op = static_cast<uint32_t>(StreamOp::kPut), .ticket_id = ticket.id, .secret = ticket.secret};
  std::vector<iovec> iov{Iov(&request, sizeof(request))};
  return SendPut(std::move(iov), payloads);
}

Result<uint32_t> DataStreamClient::PutBlocks(const TransferTicket& session,
                                             std::span<const storage::BlockHeader> headers,
                                             std::span<const std::span<const uint8_t>> payloads) {
  KVTIER_RETURN_IF_ERROR(CheckIdle());
  if (headers.empty() || headers.size() > kMaxStreamKeys || payloads.size() != headers.size()) {
    return InvalidArgumentError("a keyed put of " + std::to_string(headers.size()) +
                                " headers and " + std::to_string(payloads.size()) +
                                " payloads: it takes 1 to " + std::to_string(kMaxStreamKeys) +
                                " of each, as many payloads as headers");
  }
  encoded_.clear();
  for (size_t i = 0; i < headers.size(); ++i) {
    if (payloads[i].size() != headers[i].payload_bytes) {
      return InvalidArgumentError("keyed put: block " + std::to_string(i) + "'s payload has " +
                                  std::to_string(payloads[i].size()) + " bytes, its header says " +
                                  std::to_string(headers[i].payload_bytes));
    }
    storage::EncodeHeader(headers[i], encoded_);
  }
  const StreamRequest request{.op = static_cast<uint32_t>(StreamOp::kPutHeaders),
                              .ticket_id = session.id,
                              .secret = session.secret};
  const StreamHeadersHead head{.count = static_cast<uint32_t>(headers.size()),
                               .header_bytes = static_cast<uint32_t>(encoded_.size())};
  std::vector<iovec> iov{Iov(&request, sizeof(request)), Iov(&head, sizeof(head)),
                         Iov(encoded_.data(), encoded_.size())};
  return SendPut(std::move(iov), payloads);
}

Result<uint32_t> DataStreamClient::SendPut(std::vector<iovec> iov,
                                           std::span<const std::span<const uint8_t>> payloads) {
  iov.reserve(iov.size() + payloads.size());
  for (const auto& payload : payloads) {
    if (!payload.empty()) iov.push_back(Iov(payload.data(), payload.size()));
  }
  // A node that refuses the put answers at once and drops what follows; its reply is
  // read even when sending the payloads failed.
  const bool sent = WriteFully(iov);
  const int send_errno = errno;
  Result<StreamReply> reply = ReadReply();
  if (!reply.ok()) return reply.status();
  if (!sent) {
    errno = send_errno;
    return Fail(IoError("sending payloads", address_));
  }
  return reply->blocks;
}

}  // namespace kvtier::store
