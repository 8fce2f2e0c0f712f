#include "services/rpc/gcc_kj_workaround.h"  // first: before any KJ header
#include "services/worker/rpc/peers/peer_fetcher.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <span>
#include <thread>
#include <tuple>

#include <spdlog/spdlog.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "common/thread_name.h"
#include "services/rpc/rpc_client_impl.h"
#include "services/rpc/schema/store.capnp.h"
#include "services/rpc/schema_convert.h"
#include "services/store/rpc/block_header_wire.h"
#include "services/store/stream/client_pool.h"
#include "services/worker/rpc/peers/node_connections.h"
#include "storage/block_header.h"

namespace kvtier::worker {
namespace {

namespace schema = kvtier::rpc::schema;

struct Task {
  PeerFetchRequest request;
  kj::Own<kj::CrossThreadPromiseFulfiller<FetchedBlocks>> done;
};

// An openGet's answer for one block, checked against the request.
struct OpenedBlock {
  bool present = false;
  bool matches = false;  // key, scope, format and size are the request's
  uint64_t payload_bytes = 0;
  uint64_t checksum = 0;
};

// keys[first, first + count) of the request, under its scope and format, into the
// params of a get or an openGet.
template <typename Params>
void AskFor(const PeerFetchRequest& request, size_t first, size_t count, Params& params) {
  auto keys = params.initKeys(static_cast<unsigned>(count));
  for (size_t i = 0; i < count; ++i)
    rpc::FromKey(request.keys[first + i], keys[static_cast<unsigned>(i)]);
  params.setSaltScope(request.salt_scope);
  params.setFormatTag(request.format_tag);
}

struct OpenedGet {
  store::TransferTicket ticket;
  std::vector<OpenedBlock> blocks;
};

// Whether a node's header for block `i` of the request names what was asked: its key, the
// tenant's scope, the format and the layout's block size.
bool AnswersRequest(const PeerFetchRequest& request, size_t i, const BlockKey& key,
                    uint64_t salt_scope, std::string_view format_tag, uint64_t payload_bytes) {
  return key == request.keys[i] && salt_scope == request.salt_scope &&
         format_tag == request.format_tag && payload_bytes == request.block_bytes;
}

// A get session is bound to one node, salt scope and format tag.
using SessionKey = std::tuple<std::string, uint64_t, std::string>;
// A keyed get's block of another size than asked is read (the stream sends it) but never
// taken; one larger than this fails the get instead of taking the memory.
constexpr uint64_t kMaxOddBlockBytes = 256ull << 20;

}  // namespace

class PeerFetcher::Impl {
 public:
  explicit Impl(PeerFetcherOptions options)
      : options_(std::move(options)), nodes_(*options_.connections) {}

  ~Impl() {
    {
      MutexLock lock(mu_);
      stopping_ = true;
      queue_.clear();  // their promises break
    }
    wake_.NotifyAll();
    for (std::thread& t : threads_) t.join();
  }

  void Start() {
    for (uint32_t i = 0; i < options_.threads; ++i) {
      threads_.emplace_back([this, i] {
        NameThisThread("kvt-fetch-" + std::to_string(i));
        Run();
      });
    }
  }

  kj::Promise<FetchedBlocks> Fetch(PeerFetchRequest request) {
    auto paf = kj::newPromiseAndCrossThreadFulfiller<FetchedBlocks>();
    {
      MutexLock lock(mu_);
      queue_.push_back({std::move(request), kj::mv(paf.fulfiller)});
    }
    wake_.NotifyOne();
    return kj::mv(paf.promise);
  }

 private:
  void Run() {
    for (;;) {
      Task task;
      {
        MutexLock lock(mu_);
        wake_.Wait(lock, [this]() KVTIER_REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task.done->fulfill(Serve(task.request));
    }
  }

  FetchedBlocks Serve(const PeerFetchRequest& request) {
    FetchedBlocks out;
    out.block_bytes = request.block_bytes;
    out.keys.reserve(request.keys.size());  // one allocation, however many blocks come
    if (LandsInPlace(request)) {
      const bool fits = request.land_in.size() == request.keys.size() &&
                        std::ranges::all_of(request.land_in, [&](auto s) {
                          return s.size() == request.block_bytes;
                        });
      if (!fits) {
        spdlog::error(
            "a peer fetch of {} blocks of {} bytes was given {} landing places of other sizes: "
            "nothing fetched",
            request.keys.size(), request.block_bytes, request.land_in.size());
        return out;
      }
    } else {
      out.bytes.reserve(request.keys.size() *
                        request.block_bytes);  // the blocks land without regrowth
    }
    std::vector<std::string> seen;
    for (const std::string& node : request.node_ids) {
      if (out.keys.size() == request.keys.size()) break;
      if (std::find(seen.begin(), seen.end(), node) != seen.end()) continue;
      seen.push_back(node);
      if (std::find(options_.self_node_ids.begin(), options_.self_node_ids.end(), node) !=
          options_.self_node_ids.end()) {
        continue;
      }
      Result<std::string> address = nodes_.Resolve(node);
      if (!address.ok()) {
        // A node that left holds nothing; only a coordinator that did not answer is news.
        if (address.status().code() != StatusCode::kNotFound) {
          spdlog::warn("resolving {}: {}", node, address.status().ToString());
        }
        continue;
      }
      if (Status s = FetchFrom(*address, request, out); !s.ok()) {
        spdlog::warn("fetching blocks from {} ({}): {}", node, *address, s.ToString());
      }
    }
    if (request.land && !out.keys.empty()) {
      const Status landed = request.land(out);
      out.landed = landed.ok();
      if (!landed.ok())
        spdlog::warn("landing {} fetched blocks: {}", out.keys.size(), landed.ToString());
    }
    return out;
  }

  // Reads the leading run of the blocks still wanted that `address` holds into `out`,
  // in calls of at most max_blocks_per_call blocks.
  Status FetchFrom(const std::string& address, const PeerFetchRequest& request,
                   FetchedBlocks& out) {
    KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<rpc::RpcClient> peer, nodes_.Connect(address));
    while (out.keys.size() < request.keys.size()) {
      const size_t first = out.keys.size();
      const size_t count =
          std::min<size_t>(request.keys.size() - first, options_.max_blocks_per_call);
      Result<size_t> taken = GetBatch(address, *peer, request, first, count, out);
      if (!taken.ok()) {
        if (taken.status().code() == StatusCode::kUnavailable) nodes_.Forget(address);
        return taken.status();
      }
      if (*taken < count) break;  // the node's run ended
    }
    return Status::Ok();
  }

  // One get of keys[first, first + count); appends the leading run that checks out. On
  // the node's data stream unless it runs none.
  Result<size_t> GetBatch(const std::string& address, rpc::RpcClient& peer,
                          const PeerFetchRequest& request, size_t first, size_t count,
                          FetchedBlocks& out) {
    if (request.block_bytes >= options_.stream_min_block_bytes &&
        !Marked(Lacks::kDataStream, address)) {
      Result<size_t> streamed = StreamBatch(address, peer, request, first, count, out);
      if (streamed.status().code() != StatusCode::kUnimplemented) return streamed;
      Mark(Lacks::kDataStream, address);
    }
    return peer.impl()
        .Call<Result<size_t>>([&](schema::Session::Client& session) {
          auto get = session.storeRequest().send().getStore().getRequest();
          AskFor(request, first, count, get);
          return get.send().then([&, first, count](auto response) -> Result<size_t> {
            return Take(request, first, count, response.getBlocks(), response.getStates(), out);
          });
        })
        .get();
  }

  // On the node's data stream: keyed gets under a get session where the node serves them
  // (a store's tiers; a worker's tiers and pool), else a ticket per get (openGet: a node
  // of an earlier version, whose worker sessions did not read the pool).
  Result<size_t> StreamBatch(const std::string& address, rpc::RpcClient& peer,
                             const PeerFetchRequest& request, size_t first, size_t count,
                             FetchedBlocks& out) {
    if (!Marked(Lacks::kGetSessions, address)) {
      Result<size_t> keyed = KeyedBatch(address, peer, request, first, count, out);
      if (keyed.status().code() != StatusCode::kUnimplemented) return keyed;
      Mark(Lacks::kGetSessions, address);
    }
    return TicketBatch(peer, request, first, count, out);
  }

  // A kept session that the node no longer knows (idle past its ttl, or the node
  // restarted) is opened again once.
  Result<size_t> KeyedBatch(const std::string& address, rpc::RpcClient& peer,
                            const PeerFetchRequest& request, size_t first, size_t count,
                            FetchedBlocks& out) {
    const SessionKey key{address, request.salt_scope, request.format_tag};
    for (int attempt = 0;; ++attempt) {
      KVTIER_ASSIGN_OR_RETURN(const store::TransferTicket session, SessionFor(key, peer));
      Result<size_t> taken = KeyedGet(session, request, first, count, out);
      const StatusCode code = taken.status().code();
      if (attempt > 0 || (code != StatusCode::kNotFound && code != StatusCode::kPermissionDenied))
        return taken;
      MutexLock lock(mu_);
      sessions_.erase(key);
    }
  }

  Result<size_t> KeyedGet(const store::TransferTicket& session, const PeerFetchRequest& request,
                          size_t first, size_t count, FetchedBlocks& out) {
    const uint64_t block_bytes = request.block_bytes;
    const size_t base = out.bytes.size();
    if (!LandsInPlace(request)) out.bytes.resize(base + count * block_bytes);
    std::deque<std::vector<uint8_t>> odd;  // blocks of another size than asked: read, never taken
    auto buffer_for = [&](size_t i, const storage::BlockHeader& header) -> std::span<uint8_t> {
      if (header.payload_bytes == block_bytes) return PlaceOf(request, out, base, first, i);
      if (header.payload_bytes > kMaxOddBlockBytes) return {};  // refused: the whole get fails
      return odd.emplace_back(header.payload_bytes);
    };
    Result<store::DataStreamClient::KeyedGet> got =
        streams_.Run(session.data_address, [&](store::DataStreamClient& stream) {
          return stream.GetKeys(session, std::span(request.keys).subspan(first, count), buffer_for);
        });
    if (!got.ok()) {
      out.bytes.resize(base);
      return got.status();
    }
    size_t taken = 0;
    for (; taken < count && got->states[taken] == store::StreamBlockState::kPresent; ++taken) {
      const storage::BlockHeader& header = *got->headers[taken];
      const std::span<const uint8_t> payload = PlaceOf(request, out, base, first, taken);
      if (!AnswersRequest(request, first + taken, header.key, header.salt_scope, header.format_tag,
                          header.payload_bytes) ||
          storage::PayloadChecksum(payload) != header.checksum) {
        RejectedBlock(request.keys[first + taken], out);
        break;
      }
      out.keys.push_back(request.keys[first + taken]);
    }
    out.streamed += static_cast<uint32_t>(taken);
    if (!LandsInPlace(request)) out.bytes.resize(base + taken * block_bytes);
    return taken;
  }

  Result<store::TransferTicket> SessionFor(const SessionKey& key, rpc::RpcClient& peer) {
    {
      MutexLock lock(mu_);
      if (const auto it = sessions_.find(key); it != sessions_.end()) return it->second;
    }
    Result<store::TransferTicket> opened =
        peer.impl()
            .Call<Result<store::TransferTicket>>([&](schema::Session::Client& session) {
              auto open = session.storeRequest().send().getStore().openGetSessionRequest();
              open.setSaltScope(std::get<1>(key));
              open.setFormatTag(std::get<2>(key));
              return open.send().then([](auto response) -> Result<store::TransferTicket> {
                return store::FromWire(response.getTicket());
              });
            })
            .get();
    if (opened.ok()) {
      MutexLock lock(mu_);
      sessions_.insert_or_assign(key, *opened);
    }
    return opened;
  }

  static void RejectedBlock(const BlockKey& key, FetchedBlocks& out) {
    ++out.rejected;
    spdlog::warn("a peer's copy of block {} does not match its header or the request; not taken",
                 key.ToHex());
  }

  Result<size_t> TicketBatch(rpc::RpcClient& peer, const PeerFetchRequest& request, size_t first,
                             size_t count, FetchedBlocks& out) {
    KVTIER_ASSIGN_OR_RETURN(const OpenedGet opened, OpenGet(peer, request, first, count));
    // The stream sends every present block; the ones after the leading run are read and dropped.
    uint64_t total = 0;
    for (const OpenedBlock& block : opened.blocks) total += block.present ? block.payload_bytes : 0;
    if (total > count * request.block_bytes || total > opened.ticket.total_bytes) {
      return DataLossError("the node's headers claim " + std::to_string(total) + " bytes for " +
                           std::to_string(count) + " blocks of " +
                           std::to_string(request.block_bytes));
    }
    const size_t base = out.bytes.size();
    std::deque<std::vector<uint8_t>>
        odd;  // landing: blocks of another size than asked, never taken
    std::vector<std::span<uint8_t>> outs;
    if (!LandsInPlace(request)) out.bytes.resize(base + total);
    for (size_t i = 0, offset = base; i < count; ++i) {
      const uint64_t size = opened.blocks[i].present ? opened.blocks[i].payload_bytes : 0;
      if (!LandsInPlace(request)) {
        outs.emplace_back(out.bytes.data() + offset, size);
        offset += size;
      } else if (size == request.block_bytes) {
        outs.push_back(request.land_in[first + i]);
      } else {
        outs.push_back(size == 0 ? std::span<uint8_t>()
                                 : std::span<uint8_t>(odd.emplace_back(size)));
      }
    }
    Result<std::vector<store::StreamBlockState>> states = streams_.Run(
        opened.ticket.data_address,
        [&](store::DataStreamClient& stream) { return stream.Get(opened.ticket, outs); });
    if (!states.ok()) {
      out.bytes.resize(base);
      return states.status();
    }
    size_t taken = 0;
    for (; taken < count; ++taken) {
      const OpenedBlock& block = opened.blocks[taken];
      if (!block.present || (*states)[taken] != store::StreamBlockState::kPresent) break;
      if (!block.matches || storage::PayloadChecksum(outs[taken]) != block.checksum) {
        RejectedBlock(request.keys[first + taken], out);
        break;
      }
      out.keys.push_back(request.keys[first + taken]);
    }
    out.streamed += static_cast<uint32_t>(taken);
    if (!LandsInPlace(request)) out.bytes.resize(base + taken * request.block_bytes);
    return taken;
  }

  Result<OpenedGet> OpenGet(rpc::RpcClient& peer, const PeerFetchRequest& request, size_t first,
                            size_t count) {
    return peer.impl()
        .Call<Result<OpenedGet>>([&](schema::Session::Client& session) {
          auto open = session.storeRequest().send().getStore().openGetRequest();
          AskFor(request, first, count, open);
          return open.send().then([&, first, count](auto response) -> Result<OpenedGet> {
            OpenedGet opened;
            opened.ticket = store::FromWire(response.getTicket());
            const auto headers = response.getHeaders();
            const auto states = response.getStates();
            if (headers.size() != count || states.size() != count)
              return InternalError("openGet answered short");
            for (size_t i = 0; i < count; ++i) {
              const auto h = headers[static_cast<unsigned>(i)];
              OpenedBlock block;
              block.present = states[static_cast<unsigned>(i)] == schema::BlockState::PRESENT;
              block.payload_bytes = h.getPayloadBytes();
              block.checksum = h.getChecksum();
              block.matches =
                  AnswersRequest(request, first + i, rpc::ToKey(h.getKey()), h.getSaltScope(),
                                 h.getFormatTag().cStr(), block.payload_bytes);
              opened.blocks.push_back(block);
            }
            return opened;
          });
        })
        .get();
  }

  static bool LandsInPlace(const PeerFetchRequest& request) { return !request.land_in.empty(); }
  // Where block `i` of a get of keys[first...] goes: its landing place, or its place in
  // the result's buffer from `base` (the get's first block there).
  static std::span<uint8_t> PlaceOf(const PeerFetchRequest& request, FetchedBlocks& out,
                                    size_t base, size_t first, size_t i) {
    if (LandsInPlace(request)) return request.land_in[first + i];
    return {out.bytes.data() + base + i * request.block_bytes, request.block_bytes};
  }

  // What the node at an address was found not to serve.
  enum class Lacks { kDataStream, kGetSessions };
  bool Marked(Lacks what, const std::string& address) {
    MutexLock lock(mu_);
    return LackingLocked(what).contains(address);
  }
  void Mark(Lacks what, const std::string& address) {
    MutexLock lock(mu_);
    LackingLocked(what).insert(address);
  }
  std::set<std::string>& LackingLocked(Lacks what) KVTIER_REQUIRES(mu_) {
    return what == Lacks::kDataStream ? inline_only_ : no_sessions_;
  }
  // On the connection's loop: checks each answered block in order and copies the good
  // leading run out of the response.
  static size_t Take(const PeerFetchRequest& request, size_t first, size_t count,
                     capnp::List<schema::BlockPayload>::Reader blocks,
                     capnp::List<schema::BlockState>::Reader states, FetchedBlocks& out) {
    size_t taken = 0;
    for (; taken < count && taken < blocks.size() && taken < states.size(); ++taken) {
      if (states[static_cast<unsigned>(taken)] != schema::BlockState::PRESENT) break;
      const auto block = blocks[static_cast<unsigned>(taken)];
      const auto header = block.getHeader();
      const auto data = block.getData();
      const BlockKey& key = request.keys[first + taken];
      const std::span<const uint8_t> payload(data.begin(), data.size());
      if (!AnswersRequest(request, first + taken, rpc::ToKey(header.getKey()),
                          header.getSaltScope(), header.getFormatTag().cStr(),
                          header.getPayloadBytes()) ||
          data.size() != header.getPayloadBytes() ||
          header.getChecksum() != storage::PayloadChecksum(payload)) {
        RejectedBlock(key, out);
        break;
      }
      out.keys.push_back(key);
      if (LandsInPlace(request)) {
        std::memcpy(request.land_in[first + taken].data(), payload.data(),
                    payload.size());  // sizes checked
      } else {
        out.bytes.insert(out.bytes.end(), payload.begin(), payload.end());
      }
    }
    return taken;
  }

  const PeerFetcherOptions options_;
  NodeConnections& nodes_;
  std::vector<std::thread> threads_;
  Mutex mu_;  // a leaf
  CondVar wake_;
  bool stopping_ KVTIER_GUARDED_BY(mu_) = false;
  std::deque<Task> queue_ KVTIER_GUARDED_BY(mu_);
  std::set<std::string> inline_only_
      KVTIER_GUARDED_BY(mu_);  // node addresses that run no data stream
  std::set<std::string> no_sessions_ KVTIER_GUARDED_BY(mu_);  // ... or serve no get sessions
  std::map<SessionKey, store::TransferTicket> sessions_
      KVTIER_GUARDED_BY(mu_);  // kept get sessions
  // kept data stream connections
  store::DataStreamClientPool streams_{options_.threads,
                                       {.tls = options_.connections->stream_tls()}};
};

Result<std::unique_ptr<PeerFetcher>> PeerFetcher::Create(PeerFetcherOptions options) {
  if (options.connections == nullptr)
    return InvalidArgumentError("PeerFetcherOptions.connections is null");
  if (options.threads == 0)
    return InvalidArgumentError("PeerFetcherOptions.threads must be at least 1");
  if (options.max_blocks_per_call == 0)
    return InvalidArgumentError("PeerFetcherOptions.max_blocks_per_call must be at least 1");
  auto impl = std::make_unique<Impl>(std::move(options));
  impl->Start();
  return std::unique_ptr<PeerFetcher>(new PeerFetcher(std::move(impl)));
}

PeerFetcher::PeerFetcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PeerFetcher::~PeerFetcher() = default;
kj::Promise<FetchedBlocks> PeerFetcher::Fetch(PeerFetchRequest request) {
  return impl_->Fetch(std::move(request));
}

}  // namespace kvtier::worker
