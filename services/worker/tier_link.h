// TierLink: a worker's pools and its node's TieredStore, both ways.
//
// Offload: an evicted block becomes a stored block with a full header: key, parent, the
// tenant's salt scope, its priority, an XXH3 checksum of the bytes, and a format tag
// that ties it to the pool's layout and the engine's format tag, "<layout
// fingerprint>|f<hex tag>", so that it is only ever served back to a pool of the same
// layout and format. Fetch (onboard): the store copies the payload straight into the
// pool block (its checksum verified where the tier verifies).
//
// Thread safety: as the TieredStore (safe from any thread).
// Ownership: borrows the store, which outlives this object.
#pragma once

#include <string>

#include "services/worker/worker.h"
#include "storage/tiered_store.h"

namespace kvtier::worker {

// The storage format tag of blocks of `layout` written by engines with `format_tag`.
[[nodiscard]] std::string StorageFormatTag(const KvLayout& layout, uint64_t format_tag);

class TierLink final : public OffloadTarget, public OnboardSource {
 public:
  explicit TierLink(storage::TieredStore* store) : store_(store) {}
  [[nodiscard]] Status Offload(const OffloadBlock& block) override;
  [[nodiscard]] Result<SourceTier> Fetch(const OnboardBlock& block) override;

 private:
  storage::TieredStore* store_;
};

}  // namespace kvtier::worker
