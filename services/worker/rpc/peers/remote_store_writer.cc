#include "services/rpc/gcc_kj_workaround.h"  // first: before any KJ header
#include "services/worker/rpc/peers/remote_store_writer.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "common/thread_name.h"
#include "services/rpc/rpc_client_impl.h"
#include "services/rpc/schema/kvtier.capnp.h"
#include "services/rpc/schema/store.capnp.h"
#include "services/store/rpc/block_header_wire.h"
#include "services/store/stream/client_pool.h"
#include "services/worker/rpc/peers/node_connections.h"

namespace kvtier::worker {
namespace {

namespace schema = kvtier::rpc::schema;

// Blocks on their way to the store: headers[0, count) and their payloads back to back
// in bytes[0, used). Reused: headers keep their strings' capacity, bytes its size.
struct Batch {
  size_t store = 0;  // index into RemoteStoreWriterOptions::store_nodes
  std::vector<storage::BlockHeader> headers;
  size_t count = 0;
  std::vector<uint8_t> bytes;
  size_t used = 0;
  bool streamed = false;  // set by the writer thread when the batch went on a data stream
};

constexpr size_t kSpareBatches = 2;  // kept for reuse beyond the ones being filled

// The store a block goes to: the highest of hash(key, store) over the stores (rendezvous
// hashing), so every worker picks the same one and a new store takes only its share.
size_t StoreFor(const BlockKey& key, const std::vector<uint64_t>& store_hashes) {
  size_t best = 0;
  uint64_t best_score = 0;
  for (size_t i = 0; i < store_hashes.size(); ++i) {
    // splitmix64 of the pair: cheap, and well mixed for keys that are hashes already.
    uint64_t z = key.lo ^ (key.hi * 0x9e3779b97f4a7c15ull) ^ store_hashes[i];
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    if (i == 0 || z > best_score) {
      best = i;
      best_score = z;
    }
  }
  return best;
}

}  // namespace

// Lock order: mu_ is a leaf, never held across a network call.
class RemoteStoreWriter::Impl {
 public:
  explicit Impl(RemoteStoreWriterOptions options)
      : options_(std::move(options)),
        nodes_(*options_.connections),
        open_(options_.store_nodes.size()) {
    for (const std::string& node : options_.store_nodes) {
      store_hashes_.push_back(
          storage::PayloadChecksum({reinterpret_cast<const uint8_t*>(node.data()), node.size()}));
    }
  }

  ~Impl() {
    {
      MutexLock lock(mu_);
      stopping_ = true;
    }
    wake_.NotifyAll();
    if (thread_.joinable()) thread_.join();
  }

  Status Start() {
    MetricsRegistry& r = *options_.registry;
    KVTIER_ASSIGN_OR_RETURN(
        CounterFamily * blocks,
        r.AddCounter("kvtier_worker_store_writes_blocks_total",
                     "Committed blocks written through to the storage nodes, by result: written, "
                     "skipped (the queue was full), failed (refused or unreachable).",
                     {"result"}));
    KVTIER_ASSIGN_OR_RETURN(CounterFamily * bytes,
                            r.AddCounter("kvtier_worker_store_writes_bytes_total",
                                         "Payload bytes written through to the storage nodes."));
    KVTIER_ASSIGN_OR_RETURN(
        GaugeFamily * queued,
        r.AddGauge("kvtier_worker_store_writes_queued_bytes",
                   "Payload bytes waiting to be written to the storage nodes."));
    written_metric_ = &blocks->WithLabels({"written"});
    skipped_metric_ = &blocks->WithLabels({"skipped"});
    failed_metric_ = &blocks->WithLabels({"failed"});
    bytes_metric_ = &bytes->WithLabels({});
    queued_metric_ = &queued->WithLabels({});
    thread_ = std::thread([this] { Run(); });
    return Status::Ok();
  }

  std::span<uint8_t> Reserve(const storage::BlockHeader& header) {
    const uint64_t n = header.payload_bytes;
    const size_t store = StoreFor(header.key, store_hashes_);
    std::unique_ptr<Batch>& open = open_[store];
    bool submitted = false;
    {
      MutexLock lock(mu_);
      // Room first: a block that is skipped changes nothing, not even the open batch.
      if (n == 0 || stats_.queued_bytes + n > options_.max_queued_bytes) {
        ++stats_.skipped_blocks;
        skipped_metric_->Inc();
        return {};
      }
      stats_.queued_bytes += n;
      queued_metric_->Set(static_cast<double>(stats_.queued_bytes));
      if (open != nullptr && open->count > 0 && open->used + n > options_.batch_bytes) {
        ready_.push_back(std::exchange(open, nullptr));  // a spare opens below
        submitted = true;
      }
      if (open == nullptr) {
        open = TakeSpare();
        open->store = store;
      }
      last_store_ = store;
    }
    if (submitted) wake_.NotifyOne();
    Batch& batch = *open;
    if (batch.bytes.size() < batch.used + n)
      batch.bytes.resize(std::max<size_t>(options_.batch_bytes, batch.used + n));
    if (batch.count == batch.headers.size()) batch.headers.emplace_back();
    batch.headers[batch.count++] = header;
    const std::span<uint8_t> out(batch.bytes.data() + batch.used, n);
    batch.used += n;
    return out;
  }

  // Takes back the block Reserve just placed.
  void Unreserve() {
    Batch& batch = *open_[last_store_];
    const uint64_t n = batch.headers[--batch.count].payload_bytes;
    batch.used -= n;
    MutexLock lock(mu_);
    stats_.queued_bytes -= n;
    queued_metric_->Set(static_cast<double>(stats_.queued_bytes));
  }

  void Submit() {
    bool submitted = false;
    {
      MutexLock lock(mu_);
      for (std::unique_ptr<Batch>& open : open_) {
        if (open == nullptr || open->count == 0) continue;
        ready_.push_back(std::exchange(open, nullptr));  // the next Reserve opens a spare
        submitted = true;
      }
    }
    if (submitted) wake_.NotifyOne();
  }

  Status Flush(std::chrono::milliseconds timeout) {
    MutexLock lock(mu_);
    if (!idle_.WaitFor(lock, timeout,
                       [this]() KVTIER_REQUIRES(mu_) { return ready_.empty() && !in_flight_; })) {
      return DeadlineExceededError("blocks still queued for the storage nodes after " +
                                   std::to_string(timeout.count()) + " ms");
    }
    return Status::Ok();
  }

  RemoteStoreWriterStats Stats() const {
    MutexLock lock(mu_);
    return stats_;
  }

  void CountRefused() {
    MutexLock lock(mu_);
    ++stats_.failed_blocks;
    failed_metric_->Inc();
  }

 private:
  std::unique_ptr<Batch> TakeSpare() KVTIER_REQUIRES(mu_) {
    if (spare_.empty()) return std::make_unique<Batch>();
    std::unique_ptr<Batch> batch = std::move(spare_.back());
    spare_.pop_back();
    return batch;
  }

  void Run() {
    NameThisThread("kvt-offload");
    for (;;) {
      std::unique_ptr<Batch> batch;
      {
        MutexLock lock(mu_);
        wake_.Wait(lock, [this]() KVTIER_REQUIRES(mu_) { return stopping_ || !ready_.empty(); });
        if (stopping_) return;
        batch = std::move(ready_.front());
        ready_.pop_front();
        in_flight_ = true;
      }
      const Status sent = Send(*batch);
      MutexLock lock(mu_);
      Account(*batch, sent);
      batch->count = 0;
      batch->used = 0;
      batch->streamed = false;
      if (spare_.size() < kSpareBatches) spare_.push_back(std::move(batch));
      in_flight_ = false;
      idle_.NotifyAll();
    }
  }

  void Account(const Batch& batch, const Status& sent) KVTIER_REQUIRES(mu_) {
    stats_.queued_bytes -= batch.used;
    queued_metric_->Set(static_cast<double>(stats_.queued_bytes));
    if (sent.ok()) {
      stats_.written_blocks += batch.count;
      if (batch.streamed) stats_.streamed_blocks += batch.count;
      stats_.written_bytes += batch.used;
      written_metric_->Inc(static_cast<double>(batch.count));
      bytes_metric_->Inc(static_cast<double>(batch.used));
    } else {
      stats_.failed_blocks += batch.count;
      failed_metric_->Inc(static_cast<double>(batch.count));
    }
    // Said once when a store's writes start failing and once when they recover, not per batch.
    const std::string& node = options_.store_nodes[batch.store];
    if (!sent.ok() && !failing_[batch.store]) {
      spdlog::warn(
          "writing blocks through to the storage node {}: {} (dropped; this node's tiers keep "
          "them)",
          node, sent.ToString());
    } else if (sent.ok() && failing_[batch.store]) {
      spdlog::info("writing blocks through to the storage node {} again", node);
    }
    failing_[batch.store] = !sent.ok();
  }

  // Checksums the batch and puts it; once more after a reconnect when the connection failed.
  Status Send(Batch& batch) {
    size_t offset = 0;
    for (size_t i = 0; i < batch.count; ++i) {
      storage::BlockHeader& header = batch.headers[i];
      header.checksum =
          storage::PayloadChecksum({batch.bytes.data() + offset, header.payload_bytes});
      offset += header.payload_bytes;
    }
    Status sent = Put(batch);
    if (sent.code() == StatusCode::kUnavailable) sent = Put(batch);
    return sent;
  }

  // A store that runs a data stream takes the batch on it, as a keyed put under a put
  // session kept per store (its headers on the stream: no Cap'n Proto call per batch),
  // the payloads straight from the batch's buffer (as fast as inline or faster:
  // docs/history/benchmarks-2026-11.md#keyed-puts-under-a-put-session-2026-11-25-stop-30). One that
  // answers UNIMPLEMENTED (TLS, or its stream off) takes batches inline.
  Status Put(Batch& batch) {
    const std::string& node = options_.store_nodes[batch.store];
    KVTIER_ASSIGN_OR_RETURN(std::string address, nodes_.Resolve(node));
    Result<std::shared_ptr<rpc::RpcClient>> store = nodes_.Connect(address);
    if (!store.ok()) return store.status().WithContext(node + " at " + address);
    if (!inline_only_.contains(address)) {
      const Status streamed = PutOnStream(**store, address, batch);
      if (streamed.code() != StatusCode::kUnimplemented) {
        batch.streamed = streamed.ok();
        if (streamed.code() == StatusCode::kUnavailable) {
          nodes_.Forget(address);
          put_sessions_.erase(address);
        }
        return streamed.WithContext(node + " at " + address);
      }
      inline_only_.insert(address);
    }
    Result<uint32_t> stored =
        (*store)
            ->impl()
            .Call<Result<uint32_t>>([&](schema::Session::Client& session) {
              auto put = session.storeRequest().send().getStore().putRequest();
              FillPut(batch, put);
              return put.send().then(
                  [](auto response) -> Result<uint32_t> { return response.getStored(); });
            })
            .get();
    if (!stored.ok()) {
      if (stored.status().code() == StatusCode::kUnavailable) nodes_.Forget(address);
      return stored.status().WithContext(node + " at " + address);
    }
    return Status::Ok();
  }

  // The batch as a keyed put; a session the store no longer knows (it restarted, or the
  // session sat idle past its ttl) is opened again once. A store that opens no put
  // sessions (an older build) takes the batch by an openPut ticket.
  Status PutOnStream(rpc::RpcClient& store, const std::string& address, const Batch& batch) {
    payloads_.clear();
    for (size_t i = 0, offset = 0; i < batch.count; offset += batch.headers[i].payload_bytes, ++i) {
      payloads_.emplace_back(batch.bytes.data() + offset, batch.headers[i].payload_bytes);
    }
    const std::span<const storage::BlockHeader> headers(batch.headers.data(), batch.count);
    for (int attempt = 0;; ++attempt) {
      Result<store::TransferTicket> session = PutSessionFor(store, address);
      if (session.status().code() == StatusCode::kUnimplemented) {
        // No put sessions: tickets from now on (and, where the store runs no data stream
        // at all, that answers UNIMPLEMENTED too, and the caller goes inline).
        no_put_sessions_.insert(address);
        return PutByTicket(store, headers);
      }
      if (!session.ok()) return session.status();
      Status put = streams_.Run(session->data_address, [&](store::DataStreamClient& stream) {
        return stream.PutBlocks(*session, headers, payloads_).status();
      });
      const bool forgotten =
          put.code() == StatusCode::kNotFound || put.code() == StatusCode::kPermissionDenied;
      if (!forgotten || attempt == 1) return put;
      put_sessions_.erase(address);
    }
  }

  // The store's put session, opened with the node credential (each header names its
  // scope). kUnimplemented: the store opens none (an older build, or no data stream).
  Result<store::TransferTicket> PutSessionFor(rpc::RpcClient& store, const std::string& address) {
    if (no_put_sessions_.contains(address))
      return UnimplementedError(address + " opens no put sessions");
    if (const auto it = put_sessions_.find(address); it != put_sessions_.end()) return it->second;
    Result<store::TransferTicket> opened =
        store.impl()
            .Call<Result<store::TransferTicket>>([&](schema::Session::Client& session) {
              return session.storeRequest().send().getStore().openPutSessionRequest().send().then(
                  [](auto response) -> Result<store::TransferTicket> {
                    return store::FromWire(response.getTicket());
                  });
            })
            .get();
    if (opened.ok()) put_sessions_.insert_or_assign(address, *opened);
    return opened;
  }

  Status PutByTicket(rpc::RpcClient& store, std::span<const storage::BlockHeader> headers) {
    KVTIER_ASSIGN_OR_RETURN(
        const store::TransferTicket ticket,
        store.impl()
            .Call<Result<store::TransferTicket>>([&](schema::Session::Client& session) {
              auto open = session.storeRequest().send().getStore().openPutRequest();
              auto wire = open.initHeaders(static_cast<unsigned>(headers.size()));
              for (size_t i = 0; i < headers.size(); ++i) {
                store::ToWire(headers[i], wire[static_cast<unsigned>(i)]);
              }
              return open.send().then([](auto response) -> Result<store::TransferTicket> {
                return store::FromWire(response.getTicket());
              });
            })
            .get());
    return streams_.Run(ticket.data_address, [&](store::DataStreamClient& stream) {
      return stream.Put(ticket, payloads_).status();
    });
  }

  static void FillPut(const Batch& batch, schema::BlockStore::PutParams::Builder put) {
    auto blocks = put.initBlocks(static_cast<unsigned>(batch.count));
    size_t offset = 0;
    for (size_t i = 0; i < batch.count; ++i) {
      const storage::BlockHeader& header = batch.headers[i];
      auto block = blocks[static_cast<unsigned>(i)];
      store::ToWire(header, block.initHeader());
      block.setData(kj::arrayPtr(batch.bytes.data() + offset, header.payload_bytes));
      offset += header.payload_bytes;
    }
  }

  const RemoteStoreWriterOptions options_;
  NodeConnections& nodes_;
  std::vector<uint64_t> store_hashes_;  // of the store ids, in options_ order
  // The producer's: each store's batch being filled (moved to ready_ under mu_), and the
  // store of the last block reserved.
  std::vector<std::unique_ptr<Batch>> open_;
  size_t last_store_ = 0;
  std::thread thread_;
  // The writer thread's:
  std::vector<bool> failing_ = std::vector<bool>(options_.store_nodes.size());
  std::set<std::string> inline_only_;      // store addresses that run no data stream
  std::set<std::string> no_put_sessions_;  // ... that run one but open no put sessions
  std::map<std::string, store::TransferTicket>
      put_sessions_;  // kept put sessions, by store address
  // kept data stream connections
  store::DataStreamClientPool streams_{1, {.tls = options_.connections->stream_tls()}};
  std::vector<std::span<const uint8_t>> payloads_;
  Counter* written_metric_ = nullptr;
  Counter* skipped_metric_ = nullptr;
  Counter* failed_metric_ = nullptr;
  Counter* bytes_metric_ = nullptr;
  Gauge* queued_metric_ = nullptr;
  mutable Mutex mu_;
  CondVar wake_;
  CondVar idle_;
  bool stopping_ KVTIER_GUARDED_BY(mu_) = false;
  bool in_flight_ KVTIER_GUARDED_BY(mu_) = false;
  std::deque<std::unique_ptr<Batch>> ready_ KVTIER_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Batch>> spare_ KVTIER_GUARDED_BY(mu_);
  RemoteStoreWriterStats stats_ KVTIER_GUARDED_BY(mu_);
};

Result<std::unique_ptr<RemoteStoreWriter>> RemoteStoreWriter::Create(
    RemoteStoreWriterOptions options) {
  if (options.connections == nullptr || options.registry == nullptr ||
      options.store_nodes.empty()) {
    return InvalidArgumentError(
        "RemoteStoreWriterOptions: connections, registry and store_nodes are required");
  }
  for (size_t i = 0; i < options.store_nodes.size(); ++i) {
    const std::string& node = options.store_nodes[i];
    if (node.empty() || std::find(options.store_nodes.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                  options.store_nodes.end(), node) != options.store_nodes.end()) {
      return InvalidArgumentError("RemoteStoreWriterOptions.store_nodes: \"" + node +
                                  "\" is empty or named twice");
    }
  }
  if (options.batch_bytes == 0 || options.batch_bytes > options.max_queued_bytes) {
    return InvalidArgumentError(
        "RemoteStoreWriterOptions.batch_bytes (" + std::to_string(options.batch_bytes) +
        ") must be in [1, max_queued_bytes = " + std::to_string(options.max_queued_bytes) + "]");
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  KVTIER_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<RemoteStoreWriter>(new RemoteStoreWriter(std::move(impl)));
}

RemoteStoreWriter::RemoteStoreWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RemoteStoreWriter::~RemoteStoreWriter() = default;
std::span<uint8_t> RemoteStoreWriter::Reserve(const storage::BlockHeader& header) {
  return impl_->Reserve(header);
}
void RemoteStoreWriter::Unreserve() { impl_->Unreserve(); }
void RemoteStoreWriter::Submit() { impl_->Submit(); }
Status RemoteStoreWriter::Flush(std::chrono::milliseconds timeout) { return impl_->Flush(timeout); }
RemoteStoreWriterStats RemoteStoreWriter::Stats() const { return impl_->Stats(); }
void RemoteStoreWriter::CountRefused() { impl_->CountRefused(); }

}  // namespace kvtier::worker
