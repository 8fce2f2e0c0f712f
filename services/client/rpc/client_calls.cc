// The Client's calls over Cap'n Proto: each builds its request on the connection's event
// loop (services/rpc/rpc_client_impl.h) from values it owns (an attempt may run again)
// and converts the answer to the SDK's plain types.

#include "services/rpc/gcc_kj_workaround.h"  // first: before any KJ header

#include <kj/function.h>

#include "services/client/client.h"
#include "services/client/rpc/client_connection.h"
#include "services/client/rpc/lookup_reader.h"
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
  // The root client: the connection's own session.
  explicit Impl(std::shared_ptr<ClientConnection> connection)
      : connection_(std::move(connection)), tenant_(connection_->rpc->tenant()) {}
  // A view acting for `tenant`, whose sibling session ForTenant obtains.
  Impl(std::shared_ptr<ClientConnection> connection, const std::string& tenant)
      : connection_(std::move(connection)), acting_for_(tenant), tenant_(tenant) {}
  ~Impl() {
    // Capabilities and answers die on the loop thread that made them.
    connection_->rpc->impl().RunOnLoop([id = id_, deferred = connection_->deferred] {
      id->closed = true;
      id->worker = nullptr;
      id->session = nullptr;
      deferred->CallSent();
    });
  }

  const std::string& tenant() const { return tenant_; }

  // A view of this connection acting for `tenant`, once the node granted it.
  Result<std::unique_ptr<Client>> ForTenant(const std::string& tenant) {
    auto view = std::make_unique<Impl>(connection_, tenant);
    const std::shared_ptr<ClientIdentity> id = view->id_;
    Result<std::string> granted =
        connection_->rpc->impl()
            .Call<Result<std::string>>([id, tenant](schema::Session::Client& root) {
              auto request = root.actForRequest();
              request.setTenant(tenant);
              auto answer = request.send();
              id->session = kj::heap<schema::Session::Client>(answer.getSession());
              return answer.then(
                  [](auto r) -> Result<std::string> { return std::string(r.getTenant().cStr()); });
            })
            .get();
    if (!granted.ok()) return granted.status();
    view->tenant_ = *std::move(granted);
    return std::unique_ptr<Client>(new Client(std::move(view)));
  }

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
        SafeToRepeat, [pool_id, layout](schema::Worker::Client& worker, const Deferred& d) {
          auto request = worker.attachPoolRequest();
          request.setPoolId(pool_id);
          rpc::FromLayout(layout, request.initLayout());
          return request.send().then(
              ThenKeep(d, [](auto& r) { return ToPoolMapping(r.getAttachment()); }));
        });
  }

  std::future<Result<Allocation>> Allocate(AllocateRequest a) {
    return Call<Result<Allocation>>(
        RefusedByTheNode, [a = std::move(a)](schema::Worker::Client& worker, const Deferred& d) {
          auto request = worker.allocateRequest();
          request.setSequenceId(a.sequence);
          request.setPoolId(a.pool_id);
          SetKeys(a.keys, request.initKeys(static_cast<unsigned>(a.keys.size())));
          request.setNumTokens(a.num_tokens);
          rpc::FromTokens(a.tokens, request.initTokens(static_cast<unsigned>(a.tokens.size())));
          request.setFormatTag(a.format_tag);
          request.setReserveTokens(a.reserve_tokens);
          rpc::FromTokens(a.pool_ids,
                          request.initPoolIds(static_cast<unsigned>(a.pool_ids.size())));
          return request.send().then(ThenKeep(
              d, [](auto& r) -> Result<Allocation> { return ToAllocation(r.getAllocation()); }));
        });
  }

  std::future<Result<Allocation>> Extend(uint64_t sequence, uint32_t num_tokens) {
    return Call<Result<Allocation>>(
        RefusedByTheNode,
        [sequence, num_tokens](schema::Worker::Client& worker, const Deferred& d) {
          auto request = worker.extendRequest();
          request.setSequenceId(sequence);
          request.setNumTokens(num_tokens);
          return request.send().then(ThenKeep(
              d, [](auto& r) -> Result<Allocation> { return ToAllocation(r.getAllocation()); }));
        });
  }

  std::future<Result<OnboardResult>> Onboard(uint64_t sequence, std::vector<BlockKey> keys,
                                             RetentionConfig retention,
                                             std::vector<std::string> sources) {
    return Call<Result<OnboardResult>>(
        RefusedByTheNode,
        [sequence, keys = std::move(keys), retention = std::move(retention),
         sources = std::move(sources)](schema::Worker::Client& worker, const Deferred& d) {
          auto request = worker.onboardRequest();
          request.setSequenceId(sequence);
          SetKeys(keys, request.initKeys(static_cast<unsigned>(keys.size())));
          SetRetention(retention, request.initRetention());
          auto list = request.initSources(static_cast<unsigned>(sources.size()));
          for (unsigned i = 0; i < sources.size(); ++i) list[i].setNodeId(sources[i]);
          return request.send().then(ThenKeep(d, [](auto& r) -> Result<OnboardResult> {
            return OnboardResult{r.getOnboardedBlocks(), r.getCachedBlocks(), r.getFromHostBlocks(),
                                 r.getFromDiskBlocks(), r.getFromRemoteBlocks()};
          }));
        });
  }

  std::future<Result<uint32_t>> Commit(uint64_t sequence, std::vector<BlockKey> keys,
                                       RetentionConfig retention, std::vector<uint32_t> tokens) {
    return Call<Result<uint32_t>>(
        SafeToRepeat,
        [sequence, keys = std::move(keys), retention = std::move(retention),
         tokens = std::move(tokens)](schema::Worker::Client& worker, const Deferred& d) {
          auto request = worker.commitRequest();
          request.setSequenceId(sequence);
          SetKeys(keys, request.initKeys(static_cast<unsigned>(keys.size())));
          SetRetention(retention, request.initRetention());
          rpc::FromTokens(tokens, request.initTokens(static_cast<unsigned>(tokens.size())));
          return request.send().then(
              ThenKeep(d, [](auto& r) -> Result<uint32_t> { return r.getCommitted(); }));
        });
  }

  std::future<Status> Free(uint64_t sequence) {
    return Call<Status>(nullptr, [sequence](schema::Worker::Client& worker, const Deferred& d) {
      auto request = worker.freeRequest();
      request.setSequenceId(sequence);
      return request.send().then(ThenKeep(d, [](auto&) { return Status::Ok(); }));
    });
  }

  // One pool's prefix, or (two or more) the prefix all of them serve.
  std::future<Result<uint32_t>> LookupLocal(std::vector<uint32_t> pools,
                                            std::vector<BlockKey> keys) {
    return Call<Result<uint32_t>>(
        SafeToRepeat, [pools = std::move(pools), keys = std::move(keys)](
                          schema::Worker::Client& worker, const Deferred& d) {
          auto request = worker.lookupLocalRequest();
          request.setPoolId(pools.empty() ? 0 : pools.front());
          if (pools.size() != 1)
            rpc::FromTokens(pools, request.initPoolIds(static_cast<unsigned>(pools.size())));
          SetKeys(keys, request.initKeys(static_cast<unsigned>(keys.size())));
          return request.send().then(
              ThenKeep(d, [](auto& r) -> Result<uint32_t> { return r.getMatchedBlocks(); }));
        });
  }

  std::future<Result<WorkerStats>> WorkerStatistics() {
    return Call<Result<WorkerStats>>(
        SafeToRepeat, [](schema::Worker::Client& worker, const Deferred& d) {
          return worker.statsRequest().send().then(ThenKeep(d, [](auto& r) -> Result<WorkerStats> {
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
  // The node's calls, under this client's session; their answers are held in the
  // connection's deferred (ThenKeep) until its next call is sent.
  template <typename T>
  std::future<T> Call(bool (*retry_on)(const Status&),
                      kj::Function<kj::Promise<T>(schema::Worker::Client&, const Deferred&)> call) {
    return connection_->rpc->impl().Call<T>(
        [id = id_, deferred = connection_->deferred,
         call = kj::mv(call)](schema::Session::Client& root) mutable -> kj::Promise<T> {
          if (id->closed) return T(CancelledError("the client was closed before the call ran"));
          kj::Promise<T> answer = call(id->Worker(root), deferred);
          deferred->CallSent();
          return answer;
        },
        Policy(retry_on));
  }

  // The coordinator's calls, under this client's tenant: on its own connection when there
  // is one. The link is held by shared_ptr while the call is queued (ClientConnection).
  template <typename T>
  std::future<T> CoordinatorCall(
      bool (*retry_on)(const Status&),
      kj::Function<kj::Promise<T>(schema::Coordinator::Client&, Deferred)> call) {
    const std::shared_ptr<CoordinatorLink> link = connection_->Link();
    CoordinatorLink* on_loop = link.get();
    return link->rpc->impl().Call<T>(
        [on_loop, tenant = acting_for_,
         call = kj::mv(call)](schema::Session::Client& session) mutable {
          kj::Promise<T> answer = call(on_loop->For(tenant, session), on_loop->deferred);
          on_loop->deferred->CallSent();
          return answer;
        },
        Policy(retry_on));
  }

  rpc::RetryPolicy Policy(bool (*retry_on)(const Status&)) const {
    rpc::RetryPolicy policy;
    if (retry_on != nullptr) {
      policy.max_attempts = connection_->options.max_attempts;
      policy.backoff = connection_->options.retry_backoff;
      policy.should_retry = retry_on;
    }
    return policy;
  }

  const std::shared_ptr<ClientConnection> connection_;
  const std::string acting_for_;  // a view's tenant, as asked for; empty: the root client
  std::string tenant_;            // as the node named it
  // This client's session and Worker capability at the node (ClientIdentity).
  const std::shared_ptr<ClientIdentity> id_ = std::make_shared<ClientIdentity>();
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
  return std::unique_ptr<Client>(
      new Client(std::make_unique<Impl>(std::make_shared<ClientConnection>(
          std::move(rpc), std::move(coordinator), std::move(second), std::move(options)))));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;
const std::string& Client::tenant() const { return impl_->tenant(); }
Result<std::unique_ptr<Client>> Client::ForTenant(const std::string& tenant) {
  return impl_->ForTenant(tenant);
}

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
