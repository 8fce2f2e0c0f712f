#include "services/rpc/gcc_kj_workaround.h"  // first: before any KJ header
#include "services/worker/rpc/worker_service.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <kj/async.h>
#include <spdlog/spdlog.h>

#include "common/retention_limit.h"
#include "services/rpc/schema/worker.capnp.h"
#include "services/rpc/schema_convert.h"
#include "services/rpc/status_mapping.h"
#include "services/worker/rpc/peers/fetched_source.h"
#include "services/worker/rpc/peers/landing_hold.h"
#include "services/worker/rpc/peers/peer_fetcher.h"
#include "services/worker/tier_link.h"

namespace kvtier::worker {
namespace {

namespace schema = kvtier::rpc::schema;
using rpc::ThrowIfError;
using rpc::ToTokens;

// A duration of the request's retention (0: none); one past kMaxRetentionMs is refused.
std::optional<Nanos> ToDuration(uint64_t ms, const std::string& what) {
  if (ms == 0) return std::nullopt;
  Result<Nanos> duration = RetentionFromMs(ms, what);
  ThrowIfError(duration.status());
  return *duration;
}

kvtier::RetentionConfig ToRetention(schema::RetentionConfig::Reader r) {
  kvtier::RetentionConfig config;
  for (auto range : r.getRanges()) {
    kvtier::TokenRangeRetention plain;
    plain.first_token = range.getFirstToken();
    if (range.getLastToken() != 0) plain.last_token = range.getLastToken();
    plain.priority = range.getPriority();
    plain.duration =
        ToDuration(range.getDurationMs(),
                   "retention range " + std::to_string(config.ranges.size()) + "'s duration");
    config.ranges.push_back(plain);
  }
  config.decode_priority =
      r.getDecodePriority() == 0 ? kvtier::kDefaultPriority : r.getDecodePriority();
  config.decode_duration = ToDuration(r.getDecodeDurationMs(), "the decode retention");
  return config;
}

std::vector<uint32_t> ToPoolIds(capnp::List<uint32_t>::Reader ids) {
  return rpc::ToTokens(ids);  // a list of UInt32, as tokens are
}

void SetAllocation(const Allocation& a, schema::Allocation::Builder b) {
  auto ids = b.initBlockIds(static_cast<unsigned>(a.block_table.size()));
  for (unsigned i = 0; i < a.block_table.size(); ++i) ids.set(i, a.block_table[i]);
  b.setReusedBlocks(a.reused_blocks);
  b.setPartialReuseTokens(a.partial_tokens);
  auto tables = b.initTables(static_cast<unsigned>(a.tables.size()));
  for (unsigned t = 0; t < a.tables.size(); ++t) {
    tables[t].setPoolId(a.tables[t].pool_id);
    const std::vector<BlockId>& table = a.tables[t].block_table;
    auto out = tables[t].initBlockIds(static_cast<unsigned>(table.size()));
    for (unsigned i = 0; i < table.size(); ++i) out.set(i, table[i]);
  }
}

void SetOnboarded(const OnboardResult& r, schema::Worker::OnboardResults::Builder out) {
  out.setOnboardedBlocks(r.onboarded_blocks);
  out.setCachedBlocks(r.cached_blocks);
  out.setFromHostBlocks(r.from_host);
  out.setFromDiskBlocks(r.from_disk);
  out.setFromRemoteBlocks(r.from_remote);
}

void SetAttachment(const PoolAttachment& a, schema::PoolAttachment::Builder out) {
  out.setPoolId(a.pool_id);
  rpc::FromLayout(a.layout, out.initLayout());
  out.setNumBlocks(a.num_blocks);
  out.setBlockStrideBytes(a.block_stride_bytes);
  if (a.mapping.device_index >= 0) {
    out.initMapping().setCudaIpc(
        kj::arrayPtr(reinterpret_cast<const kj::byte*>(a.mapping.cuda_ipc_handle.data()),
                     a.mapping.cuda_ipc_handle.size()));
  } else {
    out.initMapping().setSharedMemory(a.mapping.shared_memory_name);
  }
  out.setDeviceIndex(a.mapping.device_index);
}

// What a call runs with where the worker lives: copies, never the capability, which may
// go while a call it made waits on a peer fetch.
struct Caller {
  Worker* worker = nullptr;
  PeerFetcher* peers = nullptr;
  ClientId client = 0;
  BlockKey root{};
  uint64_t scope = 0;
  std::shared_ptr<std::atomic<bool>> alive;  // false once the capability went
};

struct OnboardArgs {
  uint64_t sequence = 0;
  std::vector<BlockKey> keys;
  kvtier::RetentionConfig retention;
  std::vector<std::string> sources;  // node ids the client's lookup named
};

// The sequence's blank blocks in `pool_id` from `first` held for `request` to land in
// (LandingHold::Direct: its keys cut to the blocks held, since Onboard stops at the
// first block out of the window anyway); null where they cannot be (a sequence changed
// since the local onboard, a window), and `request` is unchanged.
std::shared_ptr<LandingHold> LandInPlace(const Caller& caller, SequenceId sequence,
                                         uint32_t pool_id, uint32_t first,
                                         PeerFetchRequest& request) {
  Result<std::shared_ptr<LandingHold>> held = LandingHold::Take(
      *caller.worker, caller.client, sequence, static_cast<uint32_t>(request.keys.size()), pool_id);
  if (!held.ok() || (*held)->blocks().first_block != first)
    return nullptr;  // the hold goes with `held`
  LandingHold::Direct(*held, request);
  return std::move(*held);
}

// For each pool of the sequence from pools[next] on, one after another: the blocks the
// node's tiers lacked, fetched from the nodes the client's lookup named off the worker's
// loop and landed as a second onboard (it goes on where the first stopped).
kj::Promise<OnboardResult> OnboardFromPeers(const Caller& caller,
                                            std::shared_ptr<const OnboardArgs> args,
                                            std::vector<uint32_t> pools, size_t next,
                                            OnboardResult total) {
  std::optional<SequenceState> state;
  for (; next < pools.size(); ++next) {
    Result<SequenceState> part =
        caller.worker->Sequence(caller.client, args->sequence, pools[next]);
    ThrowIfError(part.status());
    if (part->filled_blocks < args->keys.size()) {
      state = std::move(part).value();
      break;
    }
  }
  if (!state.has_value()) return total;
  const uint32_t pool_id = pools[next];
  PeerFetchRequest request;
  request.node_ids = args->sources;
  request.keys.assign(args->keys.begin() + state->filled_blocks, args->keys.end());
  request.format_tag = StorageFormatTag(state->layout, state->format_tag);
  request.salt_scope = state->salt_scope;
  request.block_bytes = state->layout.bytes_per_block();
  // The sequence's blocks take the fetched bytes in place, off the loop (a host pool's as
  // they come, a device pool's by one scatter once fetched): no copy on the loop after.
  std::shared_ptr<LandingHold> landing =
      LandInPlace(caller, args->sequence, pool_id, state->filled_blocks, request);
  return caller.peers->Fetch(std::move(request))
      .then([caller, args, pools = std::move(pools), next, total,
             landing = std::move(landing)](const FetchedBlocks& fetched) mutable {
        if (!*caller.alive)
          rpc::ThrowStatus(CancelledError("the client went while its blocks were fetched"));
        FetchedSource source(fetched, landing ? &landing->blocks() : nullptr);
        Result<OnboardResult> remote = caller.worker->Onboard(
            caller.client, args->sequence, args->keys, args->retention, &source, pools[next]);
        ThrowIfError(remote.status());
        landing.reset();
        total.onboarded_blocks += remote->onboarded_blocks;
        total.from_remote += remote->from_remote;
        total.cached_blocks = remote->cached_blocks;
        return OnboardFromPeers(caller, std::move(args), std::move(pools), next + 1, total);
      });
}

// The onboard from the node's tiers into every pool of the sequence, then, for what they
// lacked, from the nodes the client's lookup named.
kj::Promise<OnboardResult> OnboardFromAll(const Caller& caller, OnboardArgs args) {
  Worker& worker = *caller.worker;
  Result<OnboardResult> local =
      worker.Onboard(caller.client, args.sequence, args.keys, args.retention);
  ThrowIfError(local.status());
  if (local->cached_blocks >= args.keys.size() || args.sources.empty() || caller.peers == nullptr)
    return *local;
  Result<SequenceState> state = worker.Sequence(caller.client, args.sequence);
  ThrowIfError(state.status());
  return OnboardFromPeers(caller, std::make_shared<const OnboardArgs>(std::move(args)),
                          std::move(state->pools), 0, *local);
}

struct StatsView {
  WorkerStats stats;
  bool cluster_counts = false;                   // a node session's: every tenant's use
  std::vector<std::optional<KvLayout>> layouts;  // by pool
};

class WorkerServer final : public schema::Worker::Server {
 public:
  WorkerServer(const WorkerServiceContext& context, ClientId client, const auth::Tenant& tenant)
      : worker_thread_(context.worker_thread),
        salt_(tenant.salt),
        maps_pools_(tenant.maps_pools),
        cluster_counts_(tenant.node),
        caller_{.worker = context.worker,
                .peers = context.peers,
                .client = client,
                .root = salt_.Root(),
                .scope = SaltScope(tenant.salt),
                .alive = std::make_shared<std::atomic<bool>>(true)} {}

  ~WorkerServer() {
    caller_.alive->store(false);
    Worker& worker = *caller_.worker;
    const ClientId client = caller_.client;
    if (worker_thread_ == nullptr) {
      worker.DropClient(client);
      return;
    }
    // After the calls this client made, which were queued first; waits for the worker's
    // thread to get to it (once per connection).
    KJ_IF_MAYBE (e, kj::runCatchingExceptions(
                        [&] { worker_thread_->executeSync([&] { worker.DropClient(client); }); })) {
      spdlog::error("client {} left, but its holds could not be dropped: {}", client,
                    e->getDescription().cStr());
    }
  }

 protected:
  kj::Promise<void> attachPool(AttachPoolContext call) override {
    if (!maps_pools_) {
      rpc::ThrowStatus(
          PermissionDeniedError("a tenant token cannot map pool memory, which holds every tenant's "
                                "blocks: map it with an engine "
                                "credential acting for the tenant (token file \"engines:\")"));
    }
    const auto params = call.getParams();
    Result<KvLayout> layout = rpc::ToLayout(params.getLayout());
    ThrowIfError(layout.status());
    return OnWorker([worker = caller_.worker, pool = params.getPoolId(), layout = *layout] {
             return worker->AttachPool(pool, layout);
           })
        .then([call](Result<PoolAttachment> a) mutable {
          ThrowIfError(a.status());
          SetAttachment(*a, call.getResults().initAttachment());
        });
  }

  kj::Promise<void> allocate(AllocateContext call) override {
    const auto p = call.getParams();
    return OnWorker([caller = caller_, keys = Salted(p.getKeys()), tokens = ToTokens(p.getTokens()),
                     sequence = p.getSequenceId(), pool = p.getPoolId(), format = p.getFormatTag(),
                     num_tokens = p.getNumTokens(), reserve = p.getReserveTokens(),
                     pools = ToPoolIds(p.getPoolIds())] {
             return caller.worker->Allocate({.client = caller.client,
                                             .sequence = sequence,
                                             .pool_id = pool,
                                             .pool_ids = pools,
                                             .root = caller.root,
                                             .salt_scope = caller.scope,
                                             .format_tag = format,
                                             .block_keys = keys,
                                             .tokens = tokens,
                                             .num_tokens = num_tokens,
                                             .reserve_tokens = reserve});
           })
        .then([call](const Result<Allocation>& a) mutable {
          Answer(a, call.getResults().initAllocation());
        });
  }

  kj::Promise<void> extend(ExtendContext call) override {
    const auto p = call.getParams();
    return OnWorker([caller = caller_, sequence = p.getSequenceId(), tokens = p.getNumTokens()] {
             return caller.worker->Extend(caller.client, sequence, tokens);
           })
        .then([call](const Result<Allocation>& a) mutable {
          Answer(a, call.getResults().initAllocation());
        });
  }

  kj::Promise<void> free(FreeContext call) override {
    return OnWorker([caller = caller_, sequence = call.getParams().getSequenceId()] {
             return caller.worker->Free(caller.client, sequence);
           })
        .then([](const Status& freed) { ThrowIfError(freed); });
  }

  kj::Promise<void> commit(CommitContext call) override {
    const auto p = call.getParams();
    return OnWorker([caller = caller_, sequence = p.getSequenceId(), keys = Salted(p.getKeys()),
                     tokens = ToTokens(p.getTokens()), retention = ToRetention(p.getRetention())] {
             return caller.worker->Commit(caller.client, sequence, keys, tokens, retention);
           })
        .then([call](Result<uint32_t> committed) mutable {
          ThrowIfError(committed.status());
          call.getResults().setCommitted(*committed);
        });
  }

  kj::Promise<void> lookupLocal(LookupLocalContext call) override {
    const auto p = call.getParams();
    return OnWorker([caller = caller_, pool = p.getPoolId(), pools = ToPoolIds(p.getPoolIds()),
                     keys = Salted(p.getKeys())] {
             return pools.empty() ? caller.worker->LookupLocal(pool, caller.root, keys)
                                  : caller.worker->LookupLocal(pools, caller.root, keys);
           })
        .then([call](Result<uint32_t> matched) mutable {
          ThrowIfError(matched.status());
          call.getResults().setMatchedBlocks(*matched);
        });
  }

  kj::Promise<void> onboard(OnboardContext call) override {
    const auto p = call.getParams();
    OnboardArgs args{.sequence = p.getSequenceId(),
                     .keys = Salted(p.getKeys()),
                     .retention = ToRetention(p.getRetention()),
                     .sources = {}};
    for (auto location : p.getSources()) args.sources.emplace_back(location.getNodeId().cStr());
    return OnWorker([caller = caller_, args = std::move(args)]() mutable {
             return OnboardFromAll(caller, std::move(args));
           })
        .then([call](OnboardResult result) mutable { SetOnboarded(result, call.getResults()); });
  }

  kj::Promise<void> stats(StatsContext call) override {
    return OnWorker([worker = caller_.worker, all = cluster_counts_] {
             StatsView view{.stats = worker->Stats(), .layouts = {}};
             view.cluster_counts = all;
             if (!all) view.stats = OwnView(view.stats);
             for (uint32_t i = 0; i < view.stats.pools.size(); ++i) {
               Result<KvLayout> layout = worker->PoolLayout(i);
               view.layouts.push_back(layout.ok() ? std::optional<KvLayout>(*layout)
                                                  : std::nullopt);
             }
             return view;
           })
        .then([call](const StatsView& view) mutable {
          SetStats(view, call.getResults().initStats());
        });
  }

 private:
  // Runs `work` where the worker lives: now on this thread, or queued to its own (in the
  // order of the calls). Either way a promise on this thread for what `work` returns.
  template <typename Work>
  kj::PromiseForResult<Work, void> OnWorker(Work&& work) {
    if (worker_thread_ != nullptr) return worker_thread_->executeAsync(kj::fwd<Work>(work));
    return kj::evalNow(kj::fwd<Work>(work));
  }

  // The keys a request names, in the session's key space (common/block_key.h KeySalt).
  std::vector<BlockKey> Salted(capnp::List<schema::BlockKey>::Reader keys) const {
    return salt_.Apply(rpc::ToKeys(keys));
  }

  // What a tenant session sees of the pools: their sizes, never how full they are, which
  // depends on what other tenants cached.
  static WorkerStats OwnView(const WorkerStats& all) {
    WorkerStats view;
    for (const auto& pool : all.pools) {
      view.pools.emplace_back();
      view.pools.back().total = pool.total;
    }
    return view;
  }

  static void Answer(const Result<Allocation>& a, schema::Allocation::Builder out) {
    ThrowIfError(a.status());
    SetAllocation(*a, out);
  }

  static void SetStats(const StatsView& view, schema::WorkerStats::Builder out) {
    const WorkerStats& s = view.stats;
    auto pools = out.initPools(static_cast<unsigned>(s.pools.size()));
    uint64_t reuse = 0, evictions = 0;
    for (unsigned i = 0; i < s.pools.size(); ++i) {
      pools[i].setPoolId(i);
      pools[i].setTotalBlocks(s.pools[i].total);
      pools[i].setUsedBlocks(s.pools[i].in_use);
      pools[i].setCachedBlocks(s.pools[i].cached);
      if (view.layouts[i]) rpc::FromLayout(*view.layouts[i], pools[i].initLayout());
      reuse += s.pools[i].reused_blocks;
      for (uint64_t n : s.pools[i].evictions_by_priority) evictions += n;
    }
    out.setReuseHits(reuse);
    out.setEvictions(evictions);
    out.setOffloadedBlocks(s.offloaded_blocks);
    out.setOnboardedBlocks(s.onboarded_blocks);
    out.setClusterCounts(view.cluster_counts);
  }

  const kj::Executor* const worker_thread_;
  const KeySalt salt_;
  const bool maps_pools_;
  const bool cluster_counts_;  // a node session: the pool-wide counts
  const Caller caller_;
};

}  // namespace

kj::Own<capnp::Capability::Server> MakeWorkerService(WorkerServiceContext& context,
                                                     const auth::Tenant& tenant) {
  return kj::heap<WorkerServer>(context, context.next_client++, tenant);
}

}  // namespace kvtier::worker
