#include "services/worker/rpc/fetched_source.h"

#include <cstring>

namespace kvtier::worker {

Result<SourceTier> FetchedSource::Fetch(const OnboardBlock& block) {
  for (size_t i = next_; i < fetched_.keys.size(); ++i) {
    if (!(fetched_.keys[i] == block.key) || block.out.size() != fetched_.block_bytes) continue;
    // The fetch's keys are the leading run of those asked: the i-th landed in landed_[i].
    const uint8_t* bytes = landed_.empty() ? fetched_.bytes.data() + i * fetched_.block_bytes : landed_[i].data();
    next_ = i + 1;
    if (bytes == block.out.data()) return SourceTier::kRemoteInPlace;
    std::memcpy(block.out.data(), bytes, block.out.size());
    return SourceTier::kRemote;
  }
  return NotFoundError("block " + block.key.ToHex() + " was not fetched");
}

}  // namespace kvtier::worker
