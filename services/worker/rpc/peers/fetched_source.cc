#include "services/worker/rpc/peers/fetched_source.h"

#include <cstring>

namespace kvtier::worker {

bool FetchedSource::InPlace(size_t i, BlockId block) const {
  if (landing_ == nullptr || i >= landing_->blocks.size() || landing_->blocks[i] != block)
    return false;
  // A host pool's views are the blocks themselves; a device pool's run is there once landed.
  const bool host_views = !landing_->views.empty() && landing_->staged == nullptr;
  return host_views || fetched_.landed;
}

Result<SourceTier> FetchedSource::Fetch(const OnboardBlock& block) {
  for (size_t i = next_; i < fetched_.keys.size(); ++i) {
    if (!(fetched_.keys[i] == block.key) || block.out.size() != fetched_.block_bytes) continue;
    next_ = i + 1;
    if (InPlace(i, block.block)) return SourceTier::kRemoteInPlace;
    // The fetch's keys are the leading run of those asked: the i-th is in the buffer at i,
    // or where the fetch wrote it (a host pool's block, a device pool's staging).
    const bool in_views = landing_ != nullptr && !landing_->views.empty();
    const uint8_t* bytes =
        in_views ? landing_->views[i].data() : fetched_.bytes.data() + i * fetched_.block_bytes;
    std::memcpy(block.out.data(), bytes, block.out.size());
    return SourceTier::kRemote;
  }
  return NotFoundError("block " + block.key.ToHex() + " was not fetched");
}

}  // namespace kvtier::worker
