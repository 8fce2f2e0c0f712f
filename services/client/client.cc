// The Client's synchronous forms and key computation; the calls themselves are in
// rpc/client_calls.cc.
#include "services/client/client.h"

#include <algorithm>

#include "common/shared_pool_memory.h"

namespace kvtier::client {

std::vector<BlockKey> Client::BlockKeys(std::span<const uint32_t> tokens, uint32_t tokens_per_block,
                                        const BlockExtraKeys& extra) {
  // The salt is the server's business: it scopes every key to the session's tenant, so
  // keys are computed under the empty salt on every client.
  return ComputeBlockKeys("", tokens, tokens_per_block, extra);
}

struct MappedPool::Memory {
  SharedPoolMemory shared;
};

Result<MappedPool> MappedPool::Map(const PoolMapping& mapping) {
  if (mapping.shared_memory_name.empty()) {
    return FailedPreconditionError("pool " + std::to_string(mapping.pool_id) + " is in GPU " +
                                   std::to_string(mapping.device) +
                                   " memory: open its CUDA IPC handle instead");
  }
  KVTIER_ASSIGN_OR_RETURN(
      SharedPoolMemory shared,
      SharedPoolMemory::Map(mapping.shared_memory_name,
                            uint64_t{mapping.num_blocks} * mapping.block_stride_bytes));
  return MappedPool(std::make_unique<Memory>(Memory{std::move(shared)}), mapping.block_stride_bytes,
                    mapping.layout.bytes_per_block());
}

MappedPool::MappedPool(std::unique_ptr<Memory> memory, uint64_t stride, uint64_t block_bytes)
    : memory_(std::move(memory)), stride_(stride), block_bytes_(block_bytes) {}
MappedPool::MappedPool(MappedPool&&) noexcept = default;
MappedPool& MappedPool::operator=(MappedPool&&) noexcept = default;
MappedPool::~MappedPool() = default;

std::span<uint8_t> MappedPool::bytes() const {
  return {static_cast<uint8_t*>(memory_->shared.data()), memory_->shared.size()};
}

std::span<uint8_t> MappedPool::block(uint32_t block) const {
  return bytes().subspan(uint64_t{block} * stride_, block_bytes_);
}

Result<LookupResult> Client::Lookup(std::span<const BlockKey> keys,
                                    std::span<const uint32_t> tail_tokens) {
  return LookupAsync(keys, tail_tokens).get();
}
Result<RouteDecision> Client::Route(std::span<const BlockKey> keys,
                                    std::span<const uint32_t> tail_tokens,
                                    std::span<const std::string> candidates) {
  return RouteAsync(keys, tail_tokens, candidates).get();
}
Result<Allocation> Client::Allocate(const AllocateRequest& request) {
  return AllocateAsync(request).get();
}
Result<OnboardResult> Client::Onboard(uint64_t sequence, std::span<const BlockKey> keys,
                                      const RetentionConfig& retention,
                                      std::span<const std::string> sources) {
  return OnboardAsync(sequence, keys, retention, sources).get();
}

std::vector<std::string> Client::SourcesOf(const LookupResult& lookup) {
  std::vector<std::string> sources;
  for (const Tier tier : {Tier::kGpu, Tier::kHost, Tier::kDisk}) {
    for (const std::vector<Location>& block : lookup.locations) {
      for (const Location& location : block) {
        if (location.tier == tier &&
            std::find(sources.begin(), sources.end(), location.node_id) == sources.end()) {
          sources.push_back(location.node_id);
        }
      }
    }
  }
  return sources;
}
Result<uint32_t> Client::Commit(uint64_t sequence, std::span<const BlockKey> keys,
                                const RetentionConfig& retention,
                                std::span<const uint32_t> tokens) {
  return CommitAsync(sequence, keys, retention, tokens).get();
}
Status Client::Free(uint64_t sequence) { return FreeAsync(sequence).get(); }

}  // namespace kvtier::client
