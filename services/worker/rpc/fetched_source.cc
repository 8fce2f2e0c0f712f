#include "services/worker/rpc/fetched_source.h"

#include <cstring>

namespace kvtier::worker {

bool FetchedSource::InPlace(size_t i, BlockId block) const {
  if (landing_ == nullptr || i >= landing_->blocks.size() || landing_->blocks[i] != block) return false;
  return !landing_->views.empty() || fetched_.landed;  // a host pool's land_in, or a device pool's `land`
}

Result<SourceTier> FetchedSource::Fetch(const OnboardBlock& block) {
  for (size_t i = next_; i < fetched_.keys.size(); ++i) {
    if (!(fetched_.keys[i] == block.key) || block.out.size() != fetched_.block_bytes) continue;
    next_ = i + 1;
    if (InPlace(i, block.block)) return SourceTier::kRemoteInPlace;
    // The fetch's keys are the leading run of those asked: the i-th is in the buffer at i,
    // or where it landed in a host pool.
    const bool in_views = landing_ != nullptr && !landing_->views.empty();
    const uint8_t* bytes = in_views ? landing_->views[i].data() : fetched_.bytes.data() + i * fetched_.block_bytes;
    std::memcpy(block.out.data(), bytes, block.out.size());
    return SourceTier::kRemote;
  }
  return NotFoundError("block " + block.key.ToHex() + " was not fetched");
}

}  // namespace kvtier::worker
