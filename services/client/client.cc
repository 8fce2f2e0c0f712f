// The Client's synchronous forms and key computation; the calls themselves are in
// rpc/client_calls.cc.
#include "services/client/client.h"

namespace kvtier::client {

std::vector<BlockKey> Client::BlockKeys(std::span<const uint32_t> tokens, uint32_t tokens_per_block,
                                        const BlockExtraKeys& extra) {
  // The salt is the server's business: it scopes every key to the session's tenant, so
  // keys are computed under the empty salt on every client.
  return ComputeBlockKeys("", tokens, tokens_per_block, extra);
}

Result<LookupResult> Client::Lookup(std::span<const BlockKey> keys) { return LookupAsync(keys).get(); }
Result<RouteDecision> Client::Route(std::span<const BlockKey> keys) { return RouteAsync(keys).get(); }
Result<Allocation> Client::Allocate(const AllocateRequest& request) { return AllocateAsync(request).get(); }
Result<OnboardResult> Client::Onboard(uint64_t sequence, std::span<const BlockKey> keys,
                                      const RetentionConfig& retention) {
  return OnboardAsync(sequence, keys, retention).get();
}
Result<uint32_t> Client::Commit(uint64_t sequence, std::span<const BlockKey> keys, const RetentionConfig& retention,
                                std::span<const uint32_t> tokens) {
  return CommitAsync(sequence, keys, retention, tokens).get();
}
Status Client::Free(uint64_t sequence) { return FreeAsync(sequence).get(); }

}  // namespace kvtier::client
