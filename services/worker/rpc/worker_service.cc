#include "services/rpc/gcc_kj_workaround.h"  // first: before any KJ header
#include "services/worker/rpc/worker_service.h"

#include <chrono>
#include <memory>

#include "services/rpc/schema/worker.capnp.h"
#include "services/rpc/schema_convert.h"
#include "services/rpc/status_mapping.h"
#include "services/worker/rpc/fetched_source.h"
#include "services/worker/rpc/landing_hold.h"
#include "services/worker/rpc/peer_fetcher.h"
#include "services/worker/tier_link.h"

namespace kvtier::worker {
namespace {

namespace schema = kvtier::rpc::schema;
using rpc::ThrowIfError;
using rpc::ToTokens;

coordinator::RetentionConfig ToRetention(schema::RetentionConfig::Reader r) {
  coordinator::RetentionConfig config;
  for (auto range : r.getRanges()) {
    coordinator::TokenRangeRetention plain;
    plain.first_token = range.getFirstToken();
    if (range.getLastToken() != 0) plain.last_token = range.getLastToken();
    plain.priority = range.getPriority();
    if (range.getDurationMs() != 0) plain.duration = std::chrono::milliseconds(range.getDurationMs());
    config.ranges.push_back(plain);
  }
  config.decode_priority = r.getDecodePriority() == 0 ? coordinator::kDefaultPriority : r.getDecodePriority();
  if (r.getDecodeDurationMs() != 0) config.decode_duration = std::chrono::milliseconds(r.getDecodeDurationMs());
  return config;
}

void SetAllocation(const Allocation& a, schema::Allocation::Builder b) {
  auto ids = b.initBlockIds(static_cast<unsigned>(a.block_table.size()));
  for (unsigned i = 0; i < a.block_table.size(); ++i) ids.set(i, a.block_table[i]);
  b.setReusedBlocks(a.reused_blocks);
  b.setPartialReuseTokens(a.partial_tokens);
}

void SetOnboarded(const OnboardResult& r, schema::Worker::OnboardResults::Builder out) {
  out.setOnboardedBlocks(r.onboarded_blocks);
  out.setCachedBlocks(r.cached_blocks);
  out.setFromHostBlocks(r.from_host);
  out.setFromDiskBlocks(r.from_disk);
  out.setFromRemoteBlocks(r.from_remote);
}

class WorkerServer final : public schema::Worker::Server {
 public:
  WorkerServer(Worker& worker, PeerFetcher* peers, ClientId client, const auth::Tenant& tenant)
      : worker_(worker),
        peers_(peers),
        client_(client),
        root_(RootKey(tenant.salt)),
        scope_(SaltScope(tenant.salt)),
        alive_(std::make_shared<bool>(true)) {}
  ~WorkerServer() {
    *alive_ = false;
    worker_.DropClient(client_);
  }

 protected:
  kj::Promise<void> attachPool(AttachPoolContext call) override {
    const auto params = call.getParams();
    Result<KvLayout> layout = rpc::ToLayout(params.getLayout());
    ThrowIfError(layout.status());
    Result<PoolAttachment> a = worker_.AttachPool(params.getPoolId(), *layout);
    ThrowIfError(a.status());
    auto out = call.getResults().initAttachment();
    out.setPoolId(a->pool_id);
    rpc::FromLayout(a->layout, out.initLayout());
    out.setNumBlocks(a->num_blocks);
    out.setBlockStrideBytes(a->block_stride_bytes);
    if (a->mapping.device_index >= 0) {
      out.initMapping().setCudaIpc(kj::arrayPtr(reinterpret_cast<const kj::byte*>(a->mapping.cuda_ipc_handle.data()),
                                                a->mapping.cuda_ipc_handle.size()));
    } else {
      out.initMapping().setSharedMemory(a->mapping.shared_memory_name);
    }
    out.setDeviceIndex(a->mapping.device_index);
    return kj::READY_NOW;
  }

  kj::Promise<void> allocate(AllocateContext call) override {
    const auto p = call.getParams();
    const std::vector<BlockKey> keys = rpc::ToKeys(p.getKeys());
    const std::vector<uint32_t> tokens = ToTokens(p.getTokens());
    Result<Allocation> a = worker_.Allocate({.client = client_, .sequence = p.getSequenceId(), .pool_id = p.getPoolId(),
                                             .root = root_, .salt_scope = scope_, .format_tag = p.getFormatTag(), .block_keys = keys,
                                             .tokens = tokens, .num_tokens = p.getNumTokens()});
    ThrowIfError(a.status());
    SetAllocation(*a, call.getResults().initAllocation());
    return kj::READY_NOW;
  }

  kj::Promise<void> extend(ExtendContext call) override {
    const auto p = call.getParams();
    Result<Allocation> a = worker_.Extend(client_, p.getSequenceId(), p.getNumTokens());
    ThrowIfError(a.status());
    SetAllocation(*a, call.getResults().initAllocation());
    return kj::READY_NOW;
  }

  kj::Promise<void> free(FreeContext call) override {
    ThrowIfError(worker_.Free(client_, call.getParams().getSequenceId()));
    return kj::READY_NOW;
  }

  kj::Promise<void> commit(CommitContext call) override {
    const auto p = call.getParams();
    const std::vector<BlockKey> keys = rpc::ToKeys(p.getKeys());
    const std::vector<uint32_t> tokens = ToTokens(p.getTokens());
    Result<uint32_t> committed = worker_.Commit(client_, p.getSequenceId(), keys, tokens, ToRetention(p.getRetention()));
    ThrowIfError(committed.status());
    call.getResults().setCommitted(*committed);
    return kj::READY_NOW;
  }

  kj::Promise<void> lookupLocal(LookupLocalContext call) override {
    const auto p = call.getParams();
    Result<uint32_t> matched = worker_.LookupLocal(p.getPoolId(), root_, rpc::ToKeys(p.getKeys()));
    ThrowIfError(matched.status());
    call.getResults().setMatchedBlocks(*matched);
    return kj::READY_NOW;
  }

  kj::Promise<void> onboard(OnboardContext call) override {
    const auto p = call.getParams();
    const std::vector<BlockKey> keys = rpc::ToKeys(p.getKeys());
    const coordinator::RetentionConfig retention = ToRetention(p.getRetention());
    const uint64_t sequence = p.getSequenceId();
    Result<OnboardResult> local = worker_.Onboard(client_, sequence, keys, retention);
    ThrowIfError(local.status());
    std::vector<std::string> sources;
    for (auto location : p.getSources()) sources.emplace_back(location.getNodeId().cStr());
    if (local->cached_blocks >= keys.size() || sources.empty() || peers_ == nullptr) {
      SetOnboarded(*local, call.getResults());
      return kj::READY_NOW;
    }
    // The rest from the nodes the client's lookup named, off this loop; then the blocks
    // that came land in the pool as a second onboard (it goes on where the first stopped).
    Result<SequenceState> state = worker_.Sequence(client_, sequence);
    ThrowIfError(state.status());
    PeerFetchRequest request;
    request.node_ids = std::move(sources);
    request.keys.assign(keys.begin() + local->cached_blocks, keys.end());
    request.format_tag = StorageFormatTag(state->layout, state->format_tag);
    request.salt_scope = state->salt_scope;
    request.block_bytes = state->layout.bytes_per_block();
    // The sequence's blocks take the fetched bytes in place, off this loop (a host pool's
    // as they come, a device pool's by one scatter once fetched): no copy on this loop after.
    std::shared_ptr<LandingHold> landing = LandInPlace(sequence, local->cached_blocks, request);
    return peers_->Fetch(std::move(request))
        .then([this, alive = alive_, call, keys, retention, sequence, total = *local,
               landing = std::move(landing)](FetchedBlocks fetched) mutable {
          if (!*alive) rpc::ThrowStatus(CancelledError("the client went while its blocks were fetched"));
          FetchedSource source(fetched, landing ? &landing->blocks() : nullptr);
          Result<OnboardResult> remote = worker_.Onboard(client_, sequence, keys, retention, &source);
          ThrowIfError(remote.status());
          total.onboarded_blocks += remote->onboarded_blocks;
          total.from_remote += remote->from_remote;
          total.cached_blocks = remote->cached_blocks;
          SetOnboarded(total, call.getResults());
        });
  }

  kj::Promise<void> stats(StatsContext call) override {
    const WorkerStats s = worker_.Stats();
    auto out = call.getResults().initStats();
    auto pools = out.initPools(static_cast<unsigned>(s.pools.size()));
    uint64_t reuse = 0, evictions = 0;
    for (unsigned i = 0; i < s.pools.size(); ++i) {
      pools[i].setPoolId(i);
      pools[i].setTotalBlocks(s.pools[i].total);
      pools[i].setUsedBlocks(s.pools[i].in_use);
      pools[i].setCachedBlocks(s.pools[i].cached);
      if (Result<KvLayout> layout = worker_.PoolLayout(i); layout.ok()) rpc::FromLayout(*layout, pools[i].initLayout());
      reuse += s.pools[i].reused_blocks;
      for (uint64_t n : s.pools[i].evictions_by_priority) evictions += n;
    }
    out.setReuseHits(reuse);
    out.setEvictions(evictions);
    out.setOffloadedBlocks(s.offloaded_blocks);
    out.setOnboardedBlocks(s.onboarded_blocks);
    return kj::READY_NOW;
  }

 private:
  // The sequence's blank blocks from `first` held for `request` to land in
  // (LandingHold::Direct: its keys cut to the blocks held, since Onboard stops at the
  // first block out of the window anyway); null where they cannot be (a sequence changed
  // since the local onboard, a window), and `request` is unchanged.
  std::shared_ptr<LandingHold> LandInPlace(SequenceId sequence, uint32_t first, PeerFetchRequest& request) {
    Result<std::shared_ptr<LandingHold>> held =
        LandingHold::Take(worker_, client_, sequence, static_cast<uint32_t>(request.keys.size()));
    if (!held.ok() || (*held)->blocks().first_block != first) return nullptr;  // the hold goes with `held`
    LandingHold::Direct(*held, request);
    return std::move(*held);
  }

  Worker& worker_;
  PeerFetcher* const peers_;
  const ClientId client_;
  const BlockKey root_;
  const uint64_t scope_;
  const std::shared_ptr<bool> alive_;  // read by onboards waiting on a fetch
};

}  // namespace

capnp::Capability::Client MakeWorkerService(WorkerServiceContext& context, const auth::Tenant& tenant) {
  return kj::heap<WorkerServer>(*context.worker, context.peers, context.next_client++, tenant);
}

}  // namespace kvtier::worker
