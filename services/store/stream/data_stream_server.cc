#include "services/store/stream/data_stream_server.h"

#include <algorithm>
#include <thread>

#include <asio.hpp>
#include <spdlog/spdlog.h>

#include "common/listener_health.h"
#include "common/thread_name.h"
#include "services/store/stream/source_staging.h"
#include "services/store/stream/stream_connection.h"
#include "services/store/stream/ticket_table.h"

namespace kvtier::store {
namespace {

constexpr std::chrono::milliseconds kAcceptRetryMin{10};
constexpr std::chrono::milliseconds kAcceptRetryMax{1000};

}  // namespace

class DataStreamServer::Impl {
 public:
  explicit Impl(DataStreamServerOptions options)
      : options_(std::move(options)),
        pool_(options_.max_staged_bytes),
        tickets_(*options_.clock, options_.ticket_ttl),
        loops_(MakeLoops(options_.threads)),
        acceptor_(*loops_.front()),
        accept_timer_(*loops_.front()),
        sweep_(*loops_.front()),
        tier_threads_(options_.tier_threads != 0 ? options_.tier_threads
                                                 : static_cast<uint32_t>(loops_.size())),
        tier_pool_(tier_threads_),
        admission_(AdmissionOptions(options_)) {
    const bool disk = options_.store->Stats().disk.has_value();
    context_ = {.tickets = &tickets_,
                .store = options_.store,
                .counters = &counters_,
                .staging = &pool_,
                .admission = &admission_,
                .tier_pool = &tier_pool_,
                .disk = disk,
                .lend_pages = options_.lend_pages && options_.tls == nullptr &&
                              options_.store->host_pages().can_lend(),
                .lent_grace = options_.lent_grace,
                .max_block_bytes = options_.max_block_bytes,
                .client_timeout = options_.client_timeout,
                .first_request_deadline = options_.first_request_deadline,
                .tls = options_.tls.get()};
  }

  Status Bind();
  Status AddMetrics() {
    if (options_.registry == nullptr) return Status::Ok();
    KVTIER_ASSIGN_OR_RETURN(metrics_, StreamMetrics::Create(*options_.registry));
    context_.metrics = metrics_.get();
    return Status::Ok();
  }
  void Start() {
    Accept();
    Sweep();
    for (auto& loop : loops_) {
      keep_running_.push_back(
          asio::make_work_guard(*loop));  // loops without connections wait for some
      threads_.emplace_back([loop = loop.get(), i = threads_.size()] {
        NameThisThread("kvt-stream-" + std::to_string(i));
        loop->run();
      });
    }
  }
  void Shutdown() {
    if (threads_.empty()) return;
    // Open connections die with their loops; their transfers free their staging.
    for (auto& loop : loops_) loop->stop();
    for (std::thread& thread : threads_) thread.join();
    threads_.clear();
    // Tier work in flight finishes; what it hands back waits in the stopped loops and is
    // destroyed with them (its transfers free their staging, pins and pages).
    tier_pool_.join();
    asio::error_code ignored;
    acceptor_.close(ignored);
    accept_timer_.cancel();
    tickets_.Drop();
  }

  const std::string& address() const { return address_; }
  Status Readiness() const { return health_.Readiness("the data stream " + address_); }
  Result<StreamGetOpened> OpenGet(std::span<const BlockKey> keys, const std::string& format,
                                  uint64_t scope, ExtraBlockSource* extra);
  Result<TransferTicket> OpenPut(std::vector<storage::BlockHeader> headers);
  Result<TransferTicket> OpenSession(StreamSession session) {
    if (session.op != StreamOp::kGetKeys && session.op != StreamOp::kPutHeaders) {
      return InvalidArgumentError("a session serves keyed gets or keyed puts, not operation " +
                                  std::to_string(static_cast<uint32_t>(session.op)));
    }
    if (session.op == StreamOp::kGetKeys) {
      KVTIER_RETURN_IF_ERROR(
          storage::ValidateFormatTag(session.format_tag).WithContext("a get session"));
    } else if (session.extra != nullptr) {
      return InvalidArgumentError(
          "a put session reads no block source; only a get session has one");
    }
    if (session.max_blocks == 0 || session.max_blocks > kMaxStreamKeys) {
      return InvalidArgumentError("a session of " + std::to_string(session.max_blocks) +
                                  " blocks per transfer: 1 to " + std::to_string(kMaxStreamKeys));
    }
    KVTIER_ASSIGN_OR_RETURN(const TicketTable::Added added,
                            tickets_.AddSession(std::move(session)));
    return TransferTicket{added.id, added.secret, address_, 0};
  }
  DataStreamStats Stats() const {
    DataStreamStats s;
    s.tickets_open = tickets_.size();
    s.staged_bytes = pool_.in_use_bytes();
    s.gets = counters_.gets;
    s.puts = counters_.puts;
    s.bytes_sent = counters_.bytes_sent;
    s.bytes_received = counters_.bytes_received;
    s.bytes_lent = counters_.bytes_lent;
    s.refused = counters_.refused;
    s.connections_refused = counters_.connections_refused;
    s.connections_shed = counters_.connections_shed;
    s.expired = tickets_.expired();
    s.sessions = tickets_.sessions();
    s.loops = static_cast<uint32_t>(loops_.size());
    s.tier_threads = context_.disk ? tier_threads_ : 0;
    s.lends_pages = context_.lend_pages;
    s.encrypted = context_.tls != nullptr;
    return s;
  }

 private:
  // One loop per thread (threads: 0 picks half the hardware threads, 2 to 8); each
  // connection lives on one loop, dealt round-robin as accepted. At least two: one loop
  // saturates its core before the loopback does, on 2 cores as on 16
  // (docs/history/benchmarks-2026-11.md#eight-stream-loops-on-16-cores-h200-2026-11-26-stop-35). An
  // idle loop only waits in epoll.
  static ConnectionAdmissionOptions AdmissionOptions(const DataStreamServerOptions& options) {
    const uint32_t most =
        options.max_connections != 0 ? options.max_connections : DescriptorShare(1, 4);
    return {.max_connections = most,
            .max_unauthenticated = most,
            .max_unauthenticated_per_address = std::min(most, options.max_unproven_per_address)};
  }
  static std::vector<std::unique_ptr<asio::io_context>> MakeLoops(uint32_t threads) {
    if (threads == 0) threads = std::clamp(std::thread::hardware_concurrency() / 2, 2u, 8u);
    std::vector<std::unique_ptr<asio::io_context>> loops;
    for (uint32_t i = 0; i < threads; ++i) loops.push_back(std::make_unique<asio::io_context>(1));
    return loops;
  }
  void Accept() {
    asio::io_context& loop = *loops_[next_loop_++ % loops_.size()];
    acceptor_.async_accept(asio::any_io_executor(loop.get_executor()),
                           [this](const asio::error_code& ec, asio::ip::tcp::socket socket) {
                             if (ec == asio::error::operation_aborted || !acceptor_.is_open())
                               return;
                             if (ec) return AcceptFailed(ec);
                             accept_retry_ = kAcceptRetryMin;
                             Admit(std::make_shared<StreamConnection>(context_, std::move(socket)));
                             Accept();
                           });
  }
  // Starts `connection`, or closes it when refused; sheds the oldest unproven ones for it.
  void Admit(const std::shared_ptr<StreamConnection>& connection) {
    const ConnectionAdmission::Admitted admitted = admission_.Admit(
        connection->peer(),
        [weak = std::weak_ptr<StreamConnection>(connection), loop = connection->executor()] {
          // Under the admission's lock: no strong reference here, or the connection's last
          // could go (and its destructor call the admission) on this thread.
          asio::post(loop, [weak] {
            if (const std::shared_ptr<StreamConnection> shed = weak.lock()) shed->Shed();
          });
        });
    counters_.connections_shed += admitted.shed;
    if (metrics_ != nullptr && admitted.shed > 0) metrics_->ConnectionsShed(admitted.shed);
    if (admitted.verdict == ConnectionAdmission::Verdict::kAdmitted)
      return connection->Start(admitted.id);
    ++counters_.connections_refused;  // the socket closes with the connection
    if (metrics_ != nullptr) metrics_->ConnectionRefused();
  }
  // The listener keeps going: counted, logged (sampled), not ready meanwhile, and retried
  // with backoff, since an accept that failed for want of descriptors fails again at once.
  void AcceptFailed(const asio::error_code& ec) {
    if (metrics_ != nullptr) metrics_->AcceptFailed();
    if (admission_.ShedOldest()) {
      ++counters_.connections_shed;
      if (metrics_ != nullptr) metrics_->ConnectionsShed(1);
    }
    if (const std::optional<uint64_t> failures = health_.Failed("accept: " + ec.message())) {
      spdlog::warn("data stream {}: accept failed ({} time(s) since the last line): {}", address_,
                   *failures, ec.message());
    }
    accept_timer_.expires_after(accept_retry_);
    accept_retry_ = std::min(accept_retry_ * 2, kAcceptRetryMax);
    accept_timer_.async_wait([this](const asio::error_code& wait) {
      if (!wait && acceptor_.is_open()) Accept();
    });
  }
  // Expired tickets free their staging even when no transfer comes to sweep them.
  void Sweep() {
    tickets_.Sweep();
    if (metrics_ != nullptr) {
      const uint64_t expired = tickets_.expired();
      metrics_->Expired(expired - expired_reported_);
      expired_reported_ = expired;
      metrics_->Staged(pool_.in_use_bytes());
    }
    sweep_.expires_after(std::chrono::seconds(1));
    sweep_.async_wait([this](const asio::error_code& ec) {
      if (!ec) Sweep();
    });
  }
  Result<TransferTicket> Register(OpenTransfer transfer, uint64_t total_bytes) {
    KVTIER_ASSIGN_OR_RETURN(const TicketTable::Added added, tickets_.Add(std::move(transfer)));
    return TransferTicket{added.id, added.secret, address_, total_bytes};
  }

  const DataStreamServerOptions options_;
  StagingPool pool_;
  TicketTable tickets_;
  StreamCounters counters_;
  std::unique_ptr<StreamMetrics> metrics_;
  uint64_t expired_reported_ = 0;  // first loop's thread only
  StreamContext context_;          // connections hold it: declared before the loops that own them
  std::vector<std::unique_ptr<asio::io_context>> loops_;  // the first also accepts and sweeps
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> keep_running_;
  size_t next_loop_ = 0;  // first loop's thread (and Start)
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer accept_timer_;  // the first loop's: a failed accept's retry
  std::chrono::milliseconds accept_retry_ = kAcceptRetryMin;  // first loop's thread
  ListenerHealth health_;
  asio::steady_timer sweep_;
  const uint32_t tier_threads_;
  asio::thread_pool tier_pool_;  // after the loops: destroyed (joined) before them
  std::vector<std::thread> threads_;
  std::string address_;
  StreamAdmission admission_;
};

Status DataStreamServer::Impl::Bind() {
  asio::error_code ec;
  // A host name (the RPC listener's, "localhost") binds where it resolves first.
  asio::ip::tcp::resolver resolver(*loops_.front());
  const auto resolved = resolver.resolve(
      options_.bind_host, std::to_string(options_.port),
      asio::ip::tcp::resolver::passive | asio::ip::tcp::resolver::numeric_service, ec);
  if (ec || resolved.empty()) {
    return InvalidArgumentError("data stream bind host \"" + options_.bind_host +
                                "\" does not resolve" + (ec ? ": " + ec.message() : std::string()));
  }
  const asio::ip::tcp::endpoint endpoint = resolved.begin()->endpoint();
  if (acceptor_.open(endpoint.protocol(), ec); !ec) {
    acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (acceptor_.bind(endpoint, ec); !ec)
      acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  }
  if (ec) {
    return UnavailableError("cannot listen for the data stream on " + options_.bind_host + ":" +
                            std::to_string(options_.port) + ": " + ec.message());
  }
  const std::string& advertised =
      options_.advertise_host.empty() ? options_.bind_host : options_.advertise_host;
  const bool v6 = advertised.find(':') != std::string::npos;
  address_ = (v6 ? "[" + advertised + "]" : advertised) + ":" +
             std::to_string(acceptor_.local_endpoint().port());
  return Status::Ok();
}

// Every block is looked up here, on the caller's (control) thread. A block of another
// source (a worker's pool, readable only on this thread) is copied now into staging. A
// tier's block takes nothing until the send, on the stream's loop: the host tier's blocks
// are then sent from its pages, with no copy at all, and only those gone down to disk by
// then are staged
// (docs/history/benchmarks-2026-11.md#gets-sent-from-the-host-tiers-pages-2026-11-24-stop-27).
Result<StreamGetOpened> DataStreamServer::Impl::OpenGet(std::span<const BlockKey> keys,
                                                        const std::string& format, uint64_t scope,
                                                        ExtraBlockSource* extra) {
  StreamGetOpened opened;
  opened.headers.resize(keys.size());
  OpenTransfer transfer;
  transfer.op = StreamOp::kGet;
  transfer.states.assign(keys.size(), StreamBlockState::kMissing);
  transfer.slots.resize(keys.size());
  transfer.format_tag = format;
  transfer.salt_scope = scope;
  std::vector<uint32_t> lacking;  // positions of the blocks the tiers lack
  for (uint32_t i = 0; i < keys.size(); ++i) {
    Result<storage::BlockHeader> header = options_.store->Peek({keys[i], format, scope});
    if (!header.ok()) {
      lacking.push_back(i);
      continue;
    }
    transfer.states[i] = StreamBlockState::kPresent;
    transfer.slots[i] =
        GetSlot{.bytes = header->payload_bytes, .read_at_send = true, .key = keys[i]};
    opened.headers[i] = std::move(*header);
  }
  if (extra != nullptr && !lacking.empty()) {
    KVTIER_RETURN_IF_ERROR(
        StageFromSource(*extra, keys, lacking, pool_, options_.max_block_bytes, transfer));
  }
  uint64_t total = 0;
  for (uint32_t i = 0; i < keys.size(); ++i) {
    if (transfer.states[i] != StreamBlockState::kPresent) continue;
    const GetSlot& slot = transfer.slots[i];
    if (!slot.read_at_send)
      opened.headers[i] = transfer.headers[slot.header];  // read from the source
    total += slot.bytes;
  }
  opened.states = transfer.states;
  KVTIER_ASSIGN_OR_RETURN(opened.ticket, Register(std::move(transfer), total));
  return opened;
}

Result<TransferTicket> DataStreamServer::Impl::OpenPut(std::vector<storage::BlockHeader> headers) {
  uint64_t total = 0;
  for (size_t i = 0; i < headers.size(); ++i) {
    KVTIER_RETURN_IF_ERROR(storage::ValidateHeader(headers[i], options_.max_block_bytes)
                               .WithContext("block " + std::to_string(i)));
    total += headers[i].payload_bytes;
  }
  if (headers.empty()) return InvalidArgumentError("a put of no blocks");
  OpenTransfer transfer;
  transfer.op = StreamOp::kPut;
  transfer.headers = std::move(headers);
  KVTIER_ASSIGN_OR_RETURN(transfer.buffer, pool_.Take(total));
  return Register(std::move(transfer), total);
}

Result<std::unique_ptr<DataStreamServer>> DataStreamServer::Create(
    DataStreamServerOptions options) {
  if (options.store == nullptr || options.clock == nullptr) {
    return InvalidArgumentError("DataStreamServerOptions: store and clock are required");
  }
  if (options.max_staged_bytes == 0)
    return InvalidArgumentError("DataStreamServerOptions: max_staged_bytes is 0");
  auto impl = std::make_unique<Impl>(std::move(options));
  KVTIER_RETURN_IF_ERROR(impl->Bind());
  KVTIER_RETURN_IF_ERROR(impl->AddMetrics());
  impl->Start();
  return std::unique_ptr<DataStreamServer>(new DataStreamServer(std::move(impl)));
}

DataStreamServer::DataStreamServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DataStreamServer::~DataStreamServer() { Shutdown(); }
const std::string& DataStreamServer::address() const { return impl_->address(); }
Status DataStreamServer::Readiness() const { return impl_->Readiness(); }
Result<StreamGetOpened> DataStreamServer::OpenGet(std::span<const BlockKey> keys,
                                                  const std::string& format_tag,
                                                  uint64_t salt_scope, ExtraBlockSource* extra) {
  return impl_->OpenGet(keys, format_tag, salt_scope, extra);
}
Result<TransferTicket> DataStreamServer::OpenPut(std::vector<storage::BlockHeader> headers) {
  return impl_->OpenPut(std::move(headers));
}
Result<TransferTicket> DataStreamServer::OpenSession(StreamSession session) {
  return impl_->OpenSession(std::move(session));
}
DataStreamStats DataStreamServer::Stats() const { return impl_->Stats(); }
void DataStreamServer::Shutdown() { impl_->Shutdown(); }

}  // namespace kvtier::store
