// The Client's calls over Cap'n Proto: each builds its request on the connection's event
// loop (services/rpc/rpc_client_impl.h) from values it owns (an attempt may run again)
// and converts the answer to the SDK's plain types.

#include "services/rpc/gcc_kj_workaround.h"  // first: before any KJ header

#include <kj/function.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "services/client/client.h"
#include "services/client/rpc/lookup_reader.h"
#include "services/rpc/deferred_finish.h"
#include "services/rpc/rpc_client_impl.h"
#include "services/rpc/schema_convert.h"

namespace kvtier::client {
namespace {

namespace schema = rpc::schema;

// Retry policies (client.h): calls safe to repeat, and calls the node may have refused.
bool SafeToRepeat(const Status& status) {
  return status.retry_advice() == RetryAdvice::kWithBackoff;
}
bool RefusedByTheNode(const Status& status) {
  return status.code() == StatusCode::kResourceExhausted;
}

void SetKeys(const std::vector<BlockKey>& keys, capnp::List<schema::BlockKey>::Builder out) {
  for (unsigned i = 0; i < keys.size(); ++i) rpc::FromKey(keys[i], out[i]);
}

void SetRetention(const RetentionConfig& config, schema::RetentionConfig::Builder out) {
  auto ranges = out.initRanges(static_cast<unsigned>(config.ranges.size()));
  for (unsigned i = 0; i < config.ranges.size(); ++i) {
    const kvtier::TokenRangeRetention& range = config.ranges[i];
    ranges[i].setFirstToken(range.first_token);
    ranges[i].setLastToken(range.last_token.value_or(0));
    ranges[i].setPriority(range.priority);
    if (range.duration) {
      ranges[i].setDurationMs(static_cast<uint64_t>(
          std::chrono::ceil<std::chrono::milliseconds>(*range.duration).count()));
    }
  }
  out.setDecodePriority(config.decode_priority);
  if (config.decode_duration) {
    out.setDecodeDurationMs(static_cast<uint64_t>(
        std::chrono::ceil<std::chrono::milliseconds>(*config.decode_duration).count()));
  }
}

Allocation ToAllocation(schema::Allocation::Reader r) {
  Allocation out;
  for (uint32_t id : r.getBlockIds()) out.block_ids.push_back(id);
  out.reused_blocks = r.getReusedBlocks();
  out.partial_reuse_tokens = r.getPartialReuseTokens();
  for (auto table : r.getTables()) {
    PoolTable& t = out.tables.emplace_back();
    t.pool_id = table.getPoolId();
    for (uint32_t id : table.getBlockIds()) t.block_ids.push_back(id);
  }
  return out;
}

Result<PoolMapping> ToPoolMapping(schema::PoolAttachment::Reader r) {
  KVTIER_ASSIGN_OR_RETURN(KvLayout layout, rpc::ToLayout(r.getLayout()));
  PoolMapping out{.pool_id = r.getPoolId(),
                  .layout = std::move(layout),
                  .shared_memory_name = {},
                  .cuda_ipc_handle = {}};
  out.num_blocks = r.getNumBlocks();
  out.block_stride_bytes = r.getBlockStrideBytes();
  if (r.getMapping().isCudaIpc()) {
    const capnp::Data::Reader handle = r.getMapping().getCudaIpc();
    out.cuda_ipc_handle.assign(handle.begin(), handle.end());
    out.device = r.getDeviceIndex();
  } else {
    out.shared_memory_name = r.getMapping().getSharedMemory().cStr();
  }
  return out;
}

using Deferred = std::shared_ptr<rpc::DeferredFinish>;

// A call's continuation: `convert` reads the answer, which is then held until the
// connection's next call is sent, so that its Finish rides behind that call
// (services/rpc/deferred_finish.h).
template <typename Convert>
auto ThenKeep(Deferred deferred, Convert convert) {
  return [deferred = std::move(deferred), convert = std::move(convert)](auto response) mutable {
    auto converted = convert(response);
    deferred->Keep(kj::mv(response));
    return converted;
  };
}

}  // namespace

class Client::Impl {
 public:
  // `coordinator_rpc`: a second connection for the coordinator's calls (made with
  // `coordinator_options`, and again with them when it is lost), or null.
  Impl(std::unique_ptr<rpc::RpcClient> rpc, std::unique_ptr<rpc::RpcClient> coordinator_rpc,
       rpc::RpcClientOptions coordinator_options, ClientOptions options)
      : rpc_(std::move(rpc)),
        coordinator_options_(std::move(coordinator_options)),
        options_(std::move(options)) {
    link_ = coordinator_rpc ? std::make_shared<CoordinatorLink>(std::move(coordinator_rpc))
                            : std::make_shared<CoordinatorLink>(rpc_.get(), deferred_);
  }
  ~Impl() {
    // Capabilities and answers die on the loop thread that made them.
    rpc_->impl().RunOnLoop([this] {
      worker_ = nullptr;
      deferred_->CallSent();
    });
  }

  const std::string& tenant() const { return rpc_->tenant(); }

  std::future<Result<LookupResult>> Lookup(std::vector<BlockKey> keys,
                                           std::vector<uint32_t> tail_tokens) {
    return CoordinatorCall<Result<LookupResult>>(
        SafeToRepeat, [keys = std::move(keys), tail = std::move(tail_tokens)](
                          schema::Coordinator::Client& c, Deferred deferred) {
          auto request = c.lookupRequest();
          auto body = request.initRequest();
          SetKeys(keys, body.initKeys(static_cast<unsigned>(keys.size())));
          if (!tail.empty())
            rpc::FromTokens(tail, body.initPartialTokens(static_cast<unsigned>(tail.size())));
          body.setCompactLocations(true);
          return request.send().then(ThenKeep(
              std::move(deferred),
              [](auto& r) -> Result<LookupResult> { return ReadLookupAnswer(r.getResult()); }));
        });
  }

  std::future<Result<RouteDecision>> Route(std::vector<BlockKey> keys, std::vector<uint32_t> tail,
                                           std::vector<std::string> candidates) {
    return CoordinatorCall<Result<RouteDecision>>(
        SafeToRepeat,
        [keys = std::move(keys), tail = std::move(tail), candidates = std::move(candidates)](
            schema::Coordinator::Client& c, Deferred deferred) {
          auto request = c.routeRequest();
          auto body = request.initRequest();
          SetKeys(keys, body.initKeys(static_cast<unsigned>(keys.size())));
          if (!tail.empty())
            rpc::FromTokens(tail, body.initPartialTokens(static_cast<unsigned>(tail.size())));
          auto names = body.initCandidates(static_cast<unsigned>(candidates.size()));
          for (unsigned i = 0; i < candidates.size(); ++i) names.set(i, candidates[i]);
          return request.send().then(
              ThenKeep(std::move(deferred), [](auto& r) -> Result<RouteDecision> {
                auto d = r.getDecision();
                return RouteDecision{d.getNodeId().cStr(), d.getRpcAddress().cStr(),
                                     d.getPrefixBlocks(), d.getScore(), d.getPartialTokens()};
              }));
        });
  }

  std::future<Result<CoordinatorStats>> CoordinatorStatistics() {
    return CoordinatorCall<Result<CoordinatorStats>>(
        SafeToRepeat, [](schema::Coordinator::Client& c, const Deferred&) {
          return c.statsRequest().send().then([](auto r) -> Result<CoordinatorStats> {
            auto st = r.getStats();
            return CoordinatorStats{st.getNodes(),         st.getIndexBlocks(),  st.getIndexBytes(),
                                    st.getLookups(),       st.getSequenceGaps(), st.getResyncs(),
                                    st.getLeaseExpiries(), st.getClusterCounts()};
          });
        });
  }

  std::future<Result<PoolMapping>> AttachPool(uint32_t pool_id, KvLayout layout) {
    return Call<Result<PoolMapping>>(
        SafeToRepeat, [this, pool_id, layout](schema::Session::Client& s) {
          auto request = Worker(s).attachPoolRequest();
          request.setPoolId(pool_id);
          rpc::FromLayout(layout, request.initLayout());
          return request.send().then(
              ThenKeep(deferred_, [](auto& r) { return ToPoolMapping(r.getAttachment()); }));
        });
  }

  std::future<Result<Allocation>> Allocate(AllocateRequest a) {
    return Call<Result<Allocation>>(RefusedByTheNode, [this, a = std::move(a)](
                                                          schema::Session::Client& s) {
      auto request = Worker(s).allocateRequest();
      request.setSequenceId(a.sequence);
      request.setPoolId(a.pool_id);
      SetKeys(a.keys, request.initKeys(static_cast<unsigned>(a.keys.size())));
      request.setNumTokens(a.num_tokens);
      rpc::FromTokens(a.tokens, request.initTokens(static_cast<unsigned>(a.tokens.size())));
      request.setFormatTag(a.format_tag);
      request.setReserveTokens(a.reserve_tokens);
      rpc::FromTokens(a.pool_ids, request.initPoolIds(static_cast<unsigned>(a.pool_ids.size())));
      return request.send().then(ThenKeep(deferred_, [](auto& r) -> Result<Allocation> {
        return ToAllocation(r.getAllocation());
      }));
    });
  }

  std::future<Result<Allocation>> Extend(uint64_t sequence, uint32_t num_tokens) {
    return Call<Result<Allocation>>(
        RefusedByTheNode, [this, sequence, num_tokens](schema::Session::Client& s) {
          auto request = Worker(s).extendRequest();
          request.setSequenceId(sequence);
          request.setNumTokens(num_tokens);
          return request.send().then(ThenKeep(deferred_, [](auto& r) -> Result<Allocation> {
            return ToAllocation(r.getAllocation());
          }));
        });
  }

  std::future<Result<OnboardResult>> Onboard(uint64_t sequence, std::vector<BlockKey> keys,
                                             RetentionConfig retention,
                                             std::vector<std::string> sources) {
    return Call<Result<OnboardResult>>(
        RefusedByTheNode, [this, sequence, keys = std::move(keys), retention = std::move(retention),
                           sources = std::move(sources)](schema::Session::Client& s) {
          auto request = Worker(s).onboardRequest();
          request.setSequenceId(sequence);
          SetKeys(keys, request.initKeys(static_cast<unsigned>(keys.size())));
          SetRetention(retention, request.initRetention());
          auto list = request.initSources(static_cast<unsigned>(sources.size()));
          for (unsigned i = 0; i < sources.size(); ++i) list[i].setNodeId(sources[i]);
          return request.send().then(ThenKeep(deferred_, [](auto& r) -> Result<OnboardResult> {
            return OnboardResult{r.getOnboardedBlocks(), r.getCachedBlocks(), r.getFromHostBlocks(),
                                 r.getFromDiskBlocks(), r.getFromRemoteBlocks()};
          }));
        });
  }

  std::future<Result<uint32_t>> Commit(uint64_t sequence, std::vector<BlockKey> keys,
                                       RetentionConfig retention, std::vector<uint32_t> tokens) {
    return Call<Result<uint32_t>>(
        SafeToRepeat, [this, sequence, keys = std::move(keys), retention = std::move(retention),
                       tokens = std::move(tokens)](schema::Session::Client& s) {
          auto request = Worker(s).commitRequest();
          request.setSequenceId(sequence);
          SetKeys(keys, request.initKeys(static_cast<unsigned>(keys.size())));
          SetRetention(retention, request.initRetention());
          rpc::FromTokens(tokens, request.initTokens(static_cast<unsigned>(tokens.size())));
          return request.send().then(
              ThenKeep(deferred_, [](auto& r) -> Result<uint32_t> { return r.getCommitted(); }));
        });
  }

  std::future<Status> Free(uint64_t sequence) {
    return Call<Status>(nullptr, [this, sequence](schema::Session::Client& s) {
      auto request = Worker(s).freeRequest();
      request.setSequenceId(sequence);
      return request.send().then(ThenKeep(deferred_, [](auto&) { return Status::Ok(); }));
    });
  }

  // One pool's prefix, or (two or more) the prefix all of them serve.
  std::future<Result<uint32_t>> LookupLocal(std::vector<uint32_t> pools,
                                            std::vector<BlockKey> keys) {
    return Call<Result<uint32_t>>(
        SafeToRepeat,
        [this, pools = std::move(pools), keys = std::move(keys)](schema::Session::Client& s) {
          auto request = Worker(s).lookupLocalRequest();
          request.setPoolId(pools.empty() ? 0 : pools.front());
          if (pools.size() != 1)
            rpc::FromTokens(pools, request.initPoolIds(static_cast<unsigned>(pools.size())));
          SetKeys(keys, request.initKeys(static_cast<unsigned>(keys.size())));
          return request.send().then(ThenKeep(
              deferred_, [](auto& r) -> Result<uint32_t> { return r.getMatchedBlocks(); }));
        });
  }

  std::future<Result<WorkerStats>> WorkerStatistics() {
    return Call<Result<WorkerStats>>(SafeToRepeat, [this](schema::Session::Client& s) {
      return Worker(s).statsRequest().send().then(
          ThenKeep(deferred_, [](auto& r) -> Result<WorkerStats> {
            auto st = r.getStats();
            WorkerStats out;
            for (auto pool : st.getPools()) {
              KVTIER_ASSIGN_OR_RETURN(KvLayout layout, rpc::ToLayout(pool.getLayout()));
              out.pool_layouts.push_back(std::move(layout));
              out.total_blocks += pool.getTotalBlocks();
              out.used_blocks += pool.getUsedBlocks();
              out.cached_blocks += pool.getCachedBlocks();
            }
            out.reuse_hits = st.getReuseHits();
            out.evictions = st.getEvictions();
            out.offloaded_blocks = st.getOffloadedBlocks();
            out.onboarded_blocks = st.getOnboardedBlocks();
            out.cluster_counts = st.getClusterCounts();
            return out;
          }));
    });
  }

 private:
  // The node's calls; their answers are held in deferred_ (ThenKeep) until the
  // connection's next call is sent.
  template <typename T>
  std::future<T> Call(bool (*retry_on)(const Status&),
                      kj::Function<kj::Promise<T>(schema::Session::Client&)> call) {
    return rpc_->impl().Call<T>(
        [this, call = kj::mv(call)](schema::Session::Client& session) mutable {
          kj::Promise<T> answer = call(session);
          deferred_->CallSent();
          return answer;
        },
        Policy(retry_on));
  }

  // The coordinator's connection (its own, or the node's) and the Coordinator capability
  // on it, made and dropped on that connection's loop. Calls hold it by shared_ptr while
  // they are queued, so a link replaced by a reconnect dies on a caller's thread after
  // every call queued on it ran (the loop runs them in order). `deferred` holds the
  // answers of lookups and routes until the link's next call is sent, so that their
  // Finish messages ride behind it (services/rpc/deferred_finish.h); it is shared with
  // the answers' continuations, which may run after a replaced link is gone, and used
  // and emptied on the link's loop only. On the node's connection it is the node calls'
  // deferred_: one per connection.
  struct CoordinatorLink {
    CoordinatorLink(rpc::RpcClient* shared, Deferred shared_deferred)
        : rpc(shared), deferred(std::move(shared_deferred)) {}
    explicit CoordinatorLink(std::unique_ptr<rpc::RpcClient> own)
        : rpc(own.get()), owned(std::move(own)) {}
    ~CoordinatorLink() {
      rpc->impl().RunOnLoop([this] {
        deferred->CallSent();
        capability = nullptr;
      });
    }
    rpc::RpcClient* rpc;
    std::unique_ptr<rpc::RpcClient> owned;  // null: the coordinator is at the node's address
    kj::Own<schema::Coordinator::Client> capability;  // the loop's
    Deferred deferred = std::make_shared<rpc::DeferredFinish>();
  };

  // The coordinator's calls: on its own connection when there is one.
  template <typename T>
  std::future<T> CoordinatorCall(
      bool (*retry_on)(const Status&),
      kj::Function<kj::Promise<T>(schema::Coordinator::Client&, Deferred)> call) {
    const std::shared_ptr<CoordinatorLink> link = Link();
    CoordinatorLink* on_loop = link.get();
    return link->rpc->impl().Call<T>(
        [on_loop, call = kj::mv(call)](schema::Session::Client& session) mutable {
          // Obtained once per connection, pipelined: no round trip of its own.
          if (!on_loop->capability)
            on_loop->capability = kj::heap(session.coordinatorRequest().send().getCoordinator());
          kj::Promise<T> answer = call(*on_loop->capability, on_loop->deferred);
          on_loop->deferred->CallSent();
          return answer;
        },
        Policy(retry_on));
  }

  // The coordinator's link; a connection of its own that was lost (the coordinator
  // restarted or moved) is made again first, blocking this caller (and other coordinator
  // calls) for at most the connect timeout. It holds no state a new one lacks. When the
  // connect fails the lost link is kept, and the call answers kUnavailable.
  std::shared_ptr<CoordinatorLink> Link() {
    MutexLock lock(link_mu_);
    if (link_->owned != nullptr && !link_->rpc->connected()) {
      Result<std::unique_ptr<rpc::RpcClient>> again = rpc::RpcClient::Connect(coordinator_options_);
      if (again.ok()) link_ = std::make_shared<CoordinatorLink>(std::move(again).value());
    }
    return link_;
  }

  rpc::RetryPolicy Policy(bool (*retry_on)(const Status&)) const {
    rpc::RetryPolicy policy;
    if (retry_on != nullptr) {
      policy.max_attempts = options_.max_attempts;
      policy.backoff = options_.retry_backoff;
      policy.should_retry = retry_on;
    }
    return policy;
  }

  // The session's worker capability, obtained once (pipelined: no round trip of its own).
  // It is this client's identity at the node: its sequences live there.
  schema::Worker::Client& Worker(schema::Session::Client& session) {
    if (!worker_) worker_ = kj::heap(session.workerRequest().send().getWorker());
    return *worker_;
  }

  std::unique_ptr<rpc::RpcClient> rpc_;
  const rpc::RpcClientOptions coordinator_options_;
  const ClientOptions options_;
  kj::Own<schema::Worker::Client> worker_;  // made and used on rpc_'s loop thread only
  // The node connection's held answers; used on rpc_'s loop thread only (shared with the
  // calls' continuations, which run there).
  const Deferred deferred_ = std::make_shared<rpc::DeferredFinish>();
  Mutex link_mu_;  // a leaf; held while reconnecting
  std::shared_ptr<CoordinatorLink> link_ KVTIER_GUARDED_BY(link_mu_);  // dies before rpc_
};

Result<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  rpc::RpcClientOptions connection;
  connection.address = options.address;
  connection.token = options.token;
  connection.act_for = options.act_for;
  connection.tls_ca_file = options.tls_ca_file;
  connection.tls_server_name = options.tls_server_name;
  connection.timeout = options.timeout;
  std::unique_ptr<rpc::RpcClient> coordinator;
  rpc::RpcClientOptions second = connection;
  if (!options.coordinator_address.empty()) {
    second.address = options.coordinator_address;
    if (options.tls_server_name.empty())
      second.tls_server_name.clear();  // the coordinator's own host
    Result<std::unique_ptr<rpc::RpcClient>> made = rpc::RpcClient::Connect(second);
    if (!made.ok()) return made.status().WithContext("coordinator " + options.coordinator_address);
    coordinator = std::move(made).value();
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<rpc::RpcClient> rpc,
                          rpc::RpcClient::Connect(std::move(connection)));
  return std::unique_ptr<Client>(new Client(std::make_unique<Impl>(
      std::move(rpc), std::move(coordinator), std::move(second), std::move(options))));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;
const std::string& Client::tenant() const { return impl_->tenant(); }

std::future<Result<LookupResult>> Client::LookupAsync(std::span<const BlockKey> keys,
                                                      std::span<const uint32_t> tail_tokens) {
  return impl_->Lookup({keys.begin(), keys.end()}, {tail_tokens.begin(), tail_tokens.end()});
}
std::future<Result<RouteDecision>> Client::RouteAsync(std::span<const BlockKey> keys,
                                                      std::span<const uint32_t> tail_tokens,
                                                      std::span<const std::string> candidates) {
  return impl_->Route({keys.begin(), keys.end()}, {tail_tokens.begin(), tail_tokens.end()},
                      {candidates.begin(), candidates.end()});
}
Result<CoordinatorStats> Client::GetCoordinatorStats() {
  return impl_->CoordinatorStatistics().get();
}
Result<PoolMapping> Client::AttachPool(uint32_t pool_id, const KvLayout& layout) {
  return impl_->AttachPool(pool_id, layout).get();
}
std::future<Result<Allocation>> Client::AllocateAsync(const AllocateRequest& request) {
  return impl_->Allocate(request);
}
Result<Allocation> Client::Extend(uint64_t sequence, uint32_t num_tokens) {
  return impl_->Extend(sequence, num_tokens).get();
}
std::future<Result<OnboardResult>> Client::OnboardAsync(uint64_t sequence,
                                                        std::span<const BlockKey> keys,
                                                        const RetentionConfig& retention,
                                                        std::span<const std::string> sources) {
  return impl_->Onboard(sequence, {keys.begin(), keys.end()}, retention,
                        {sources.begin(), sources.end()});
}
std::future<Result<uint32_t>> Client::CommitAsync(uint64_t sequence, std::span<const BlockKey> keys,
                                                  const RetentionConfig& retention,
                                                  std::span<const uint32_t> tokens) {
  return impl_->Commit(sequence, {keys.begin(), keys.end()}, retention,
                       {tokens.begin(), tokens.end()});
}
std::future<Status> Client::FreeAsync(uint64_t sequence) { return impl_->Free(sequence); }
Result<uint32_t> Client::LookupLocal(uint32_t pool_id, std::span<const BlockKey> keys) {
  return impl_->LookupLocal({pool_id}, {keys.begin(), keys.end()}).get();
}
Result<uint32_t> Client::LookupLocal(std::span<const uint32_t> pool_ids,
                                     std::span<const BlockKey> keys) {
  if (pool_ids.empty()) return InvalidArgumentError("LookupLocal: no pool ids given");
  return impl_->LookupLocal({pool_ids.begin(), pool_ids.end()}, {keys.begin(), keys.end()}).get();
}
Result<WorkerStats> Client::GetWorkerStats() { return impl_->WorkerStatistics().get(); }

}  // namespace kvtier::client
