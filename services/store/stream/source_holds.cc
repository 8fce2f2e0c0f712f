#include "services/store/stream/source_holds.h"

#include <spdlog/spdlog.h>

namespace kvtier::store {

SourceHolds& SourceHolds::operator=(SourceHolds&& other) noexcept {
  if (this != &other) {
    Release();
    source_ = std::exchange(other.source_, nullptr);
    owner_ = std::move(other.owner_);
    holds_ = std::exchange(other.holds_, {});
    checksums_ = std::exchange(other.checksums_, {});
  }
  return *this;
}

void SourceHolds::Release() {
  if (holds_.empty()) return;
  const std::vector<uint64_t> holds = std::exchange(holds_, {});
  const std::vector<uint64_t> checksums = std::exchange(checksums_, {});
  if (const Status released = source_->ReleaseBatch(holds, checksums);
      !released.ok() && released.code() != StatusCode::kUnavailable) {
    spdlog::warn("giving back {} blocks held for a get: {}", holds.size(), released.ToString());
  }
}

}  // namespace kvtier::store
