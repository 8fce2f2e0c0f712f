// TierOffloadTarget: the worker's evicted blocks go down into a node's TieredStore.
//
// Each block becomes a stored block with a full header: key, parent, the tenant's salt
// scope, its priority, an XXH3 checksum of the bytes, and a format tag that ties it to
// the pool's layout and the engine's format tag, "<layout fingerprint>|f<hex tag>", so
// that it is only ever served back to a pool of the same layout and format.
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

class TierOffloadTarget final : public OffloadTarget {
 public:
  explicit TierOffloadTarget(storage::TieredStore* store) : store_(store) {}
  [[nodiscard]] Status Offload(const OffloadBlock& block) override;

 private:
  storage::TieredStore* store_;
};

}  // namespace kvtier::worker
