#include "services/worker/rpc/worker_service.h"

#include <chrono>

#include "services/rpc/schema/worker.capnp.h"
#include "services/rpc/schema_convert.h"
#include "services/rpc/status_mapping.h"

namespace kvtier::worker {
namespace {

namespace schema = kvtier::rpc::schema;
using rpc::ThrowIfError;

std::vector<uint32_t> ToTokens(capnp::List<uint32_t>::Reader list) {
  std::vector<uint32_t> tokens;
  tokens.reserve(list.size());
  for (uint32_t t : list) tokens.push_back(t);
  return tokens;
}

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

class WorkerServer final : public schema::Worker::Server {
 public:
  WorkerServer(Worker& worker, ClientId client, const auth::Tenant& tenant)
      : worker_(worker), client_(client), root_(RootKey(tenant.salt)), scope_(SaltScope(tenant.salt)) {}
  ~WorkerServer() { worker_.DropClient(client_); }

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
    Result<OnboardResult> onboarded = worker_.Onboard(client_, p.getSequenceId(), keys, ToRetention(p.getRetention()));
    ThrowIfError(onboarded.status());
    call.getResults().setOnboardedBlocks(onboarded->onboarded_blocks);
    call.getResults().setCachedBlocks(onboarded->cached_blocks);
    call.getResults().setFromHostBlocks(onboarded->from_host);
    call.getResults().setFromDiskBlocks(onboarded->from_disk);
    return kj::READY_NOW;
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
  Worker& worker_;
  const ClientId client_;
  const BlockKey root_;
  const uint64_t scope_;
};

}  // namespace

capnp::Capability::Client MakeWorkerService(WorkerServiceContext& context, const auth::Tenant& tenant) {
  return kj::heap<WorkerServer>(*context.worker, context.next_client++, tenant);
}

}  // namespace kvtier::worker
