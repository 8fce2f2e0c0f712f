// BlockPool's prefix reuse: which prefixes of a chain the pool serves (whole, or in a
// windowed pool by its sinks and last window), partial reuse of the block after one, and
// the plan StartSequence follows, checked before anything changes.
#include <algorithm>
#include <string>

#include "services/worker/pool/block_pool.h"
#include "services/worker/pool/block_pool_impl.h"

namespace kvtier::worker {
namespace {

// A sequence's prompt: its tokens, or only their count, and a key per full block.
Status CheckSequenceRequest(const SequenceRequest& r, uint32_t tokens_per_block) {
  if (!r.tokens.empty() && r.num_tokens != 0 && r.num_tokens != r.tokens.size()) {
    return InvalidArgumentError("sequence " + std::to_string(r.id) + ": num_tokens " +
                                std::to_string(r.num_tokens) + " but " +
                                std::to_string(r.tokens.size()) + " tokens");
  }
  const size_t prompt = r.tokens.empty() ? r.num_tokens : r.tokens.size();
  if (prompt == 0)
    return InvalidArgumentError("sequence " + std::to_string(r.id) + " has no tokens");
  if (r.block_keys.size() != prompt / tokens_per_block) {
    return InvalidArgumentError("sequence " + std::to_string(r.id) + " has " +
                                std::to_string(prompt) + " tokens, so " +
                                std::to_string(prompt / tokens_per_block) +
                                " full-block keys, not " + std::to_string(r.block_keys.size()));
  }
  if (r.reserve_tokens != 0 && r.reserve_tokens < prompt) {
    return InvalidArgumentError("sequence " + std::to_string(r.id) + ": reserve_tokens " +
                                std::to_string(r.reserve_tokens) + " is less than its " +
                                std::to_string(prompt) + " prompt tokens");
  }
  return Status::Ok();
}

}  // namespace

std::vector<bool> BlockPool::ServablePrefixes(const BlockKey& root,
                                              std::span<const BlockKey> keys) const {
  const Impl& p = *impl_;
  const PoolWindowBlocks window = p.WindowBlocks();
  std::vector<bool> servable(keys.size() + 1, false);
  servable[0] = true;
  uint32_t run = 0;      // present blocks ending at the current one
  uint32_t leading = 0;  // present blocks from the chain's first
  BlockKey parent = root;
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto it = p.index_.find(keys[i]);
    const bool present = it != p.index_.end() && p.metas_[it->second].parent_key == parent;
    parent = keys[i];
    run = present ? run + 1 : 0;
    if (present && leading == i) ++leading;
    const auto m = static_cast<uint32_t>(i + 1);
    servable[m] = leading >= std::min(window.sinks, m) && run >= std::min(window.window, m);
  }
  return servable;
}

uint32_t BlockPool::LookupPrefix(const BlockKey& root, std::span<const BlockKey> keys) const {
  const Impl& p = *impl_;
  if (!p.windowed()) {  // the whole chain: no table of prefixes to build on the start path
    uint32_t matched = 0;
    for (BlockKey parent = root; matched < keys.size(); parent = keys[matched++]) {
      const auto it = p.index_.find(keys[matched]);
      if (it == p.index_.end() || !(p.metas_[it->second].parent_key == parent)) break;
    }
    return matched;
  }
  const std::vector<bool> servable = ServablePrefixes(root, keys);
  uint32_t longest = 0;
  for (uint32_t m = 0; m < servable.size(); ++m) {
    if (servable[m]) longest = m;
  }
  return longest;
}

uint32_t BlockPool::PartialReuseTokens(const BlockKey& root, std::span<const BlockKey> keys,
                                       uint32_t reused_blocks, std::span<const uint32_t> tokens,
                                       uint64_t format_tag) const {
  const size_t from = size_t{reused_blocks} * impl_->options_.tokens_per_block;
  if (tokens.size() <= from) return 0;
  const BlockKey& parent = reused_blocks == 0 ? root : keys[reused_blocks - 1];
  return impl_->BestPartial(parent, format_tag, tokens.subspan(from)).second;
}

Result<StartPlan> BlockPool::PlanStart(const SequenceRequest& r) const {
  const Impl& p = *impl_;
  const uint32_t tpb = p.options_.tokens_per_block;
  if (p.sequences_.contains(r.id))
    return AlreadyExistsError("sequence " + std::to_string(r.id) + " already exists");
  KVTIER_RETURN_IF_ERROR(CheckSequenceRequest(r, tpb));
  StartPlan plan;
  plan.window = p.WindowBlocks();
  if (r.reuse_blocks.has_value()) {
    const std::vector<bool> servable = ServablePrefixes(r.root, r.block_keys);
    if (*r.reuse_blocks >= servable.size() || !servable[*r.reuse_blocks]) {
      return InvalidArgumentError("sequence " + std::to_string(r.id) + ": a reuse of " +
                                  std::to_string(*r.reuse_blocks) +
                                  " blocks that this pool does not serve");
    }
    plan.matched = *r.reuse_blocks;
  } else {
    plan.matched = LookupPrefix(r.root, r.block_keys);
  }
  const BlockKey parent_key = plan.matched == 0 ? r.root : r.block_keys[plan.matched - 1];
  const auto rest = r.tokens.empty() ? r.tokens : r.tokens.subspan(size_t{plan.matched} * tpb);
  std::tie(plan.partial, plan.partial_tokens) = p.BestPartial(parent_key, r.format_tag, rest);
  plan.partial_tokens = std::min(plan.partial_tokens, r.max_partial_tokens);
  if (plan.partial_tokens == 0) plan.partial = kNoBlock;
  plan.in_place = plan.partial != kNoBlock && p.metas_[plan.partial].refs == 0 &&
                  p.metas_[plan.partial].cached_children == 0;
  const size_t prompt = r.tokens.empty() ? r.num_tokens : r.tokens.size();
  plan.needed = BlocksFor(std::max<size_t>(prompt, r.reserve_tokens), tpb);
  plan.blank = plan.needed - plan.matched - (plan.in_place ? 1 : 0);
  // Feasibility before any change: pinning cached blocks takes them out of the evictable set.
  size_t pinned_evictable = 0;
  for (uint32_t i = 0; i < plan.matched; ++i) {
    if (plan.Kept(i)) pinned_evictable += p.metas_[p.index_.at(r.block_keys[i])].refs == 0;
  }
  if (plan.partial != kNoBlock) pinned_evictable += p.metas_[plan.partial].refs == 0;
  KVTIER_RETURN_IF_ERROR(p.NeedBlocks(plan.blank + pinned_evictable));
  return plan;
}

Status BlockPool::CanStart(const SequenceRequest& request) const {
  return PlanStart(request).status();
}

}  // namespace kvtier::worker
