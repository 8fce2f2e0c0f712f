#include "storage/host_tier.h"

#include <cassert>

#include "storage/host_tier_impl.h"

namespace kvtier::storage {

static_assert(PageSlab::kNil == TierIndex::kNil, "a chain ends where the index says none");

Result<std::unique_ptr<HostTier>> HostTier::Create(HostTierOptions options) {
  if (options.page_bytes == 0 || options.page_bytes % 4096 != 0) {
    return InvalidArgumentError("host tier page_bytes " + std::to_string(options.page_bytes) +
                                " is not a positive multiple of 4096");
  }
  if (options.capacity_bytes < options.page_bytes) {
    return InvalidArgumentError("host tier capacity of " + std::to_string(options.capacity_bytes) +
                                " bytes holds no page of " + std::to_string(options.page_bytes) +
                                " bytes");
  }
  if (options.capacity_bytes / options.page_bytes >= TierIndex::kNil) {
    return InvalidArgumentError("host tier capacity of " + std::to_string(options.capacity_bytes) +
                                " bytes has too many pages; raise page_bytes");
  }
  const uint64_t bytes = options.capacity_bytes / options.page_bytes * options.page_bytes;
  KVTIER_ASSIGN_OR_RETURN(
      auto memory, HostMemory::Create(HostMemoryOptions{.bytes = bytes,
                                                        .try_huge_pages = options.try_huge_pages,
                                                        .populate = true,
                                                        .pin = options.pin,
                                                        .unpin = options.unpin}));
  return std::unique_ptr<HostTier>(
      new HostTier(std::make_unique<Impl>(std::move(options), std::move(memory))));
}

HostTier::HostTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HostTier::~HostTier() = default;
Status HostTier::Put(const BlockHeader& header, std::span<const uint8_t> payload) {
  const PutItem item{header, payload};
  return std::move(impl_->PutBatch({&item, 1}).front());
}
std::vector<Status> HostTier::PutBatch(std::span<const PutItem> items) {
  return impl_->PutBatch(items);
}
Result<BlockHeader> HostTier::Get(const BlockRef& ref, std::span<uint8_t> out) {
  return impl_->Get(ref, out);
}
Result<PinnedBlock> HostTier::Pin(const BlockRef& ref) {
  KVTIER_ASSIGN_OR_RETURN(Impl::Held held, impl_->Pin(ref));
  return PinnedBlock(this, held.first, std::move(held.header));
}
Result<BlockHeader> HostTier::Peek(const BlockRef& ref) { return impl_->Peek(ref); }
Status HostTier::Remove(const BlockRef& ref) { return impl_->Remove(ref); }
TierStats HostTier::Stats() const { return impl_->Stats(); }
uint64_t HostTier::Reclaim(uint64_t bytes) { return impl_->Reclaim(bytes); }
uint64_t HostTier::FreeBytes() const { return impl_->FreeBytes(); }
std::vector<BlockHeader> HostTier::Headers() const { return impl_->Headers(); }
bool HostTier::huge_pages() const { return impl_->memory().explicit_huge_pages(); }
bool HostTier::pinned() const { return impl_->memory().pinned(); }
bool HostTier::can_lend_pages() const { return impl_->CanLend(); }

PinnedBlock::PinnedBlock(PinnedBlock&& other) noexcept
    : tier_(std::exchange(other.tier_, nullptr)),
      first_page_(other.first_page_),
      header_(std::move(other.header_)) {}

PinnedBlock& PinnedBlock::operator=(PinnedBlock&& other) noexcept {
  if (this != &other) {
    if (tier_ != nullptr) tier_->impl_->Unpin(first_page_, /*lent=*/false);
    tier_ = std::exchange(other.tier_, nullptr);
    first_page_ = other.first_page_;
    header_ = std::move(other.header_);
  }
  return *this;
}

PinnedBlock::~PinnedBlock() {
  if (tier_ != nullptr) tier_->impl_->Unpin(first_page_, /*lent=*/false);
}

void PinnedBlock::UnpinLent() {
  if (tier_ != nullptr) tier_->impl_->Unpin(first_page_, /*lent=*/true);
  tier_ = nullptr;
}

Result<HostReservation> HostTier::Reserve(std::span<const BlockHeader> headers) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<uint32_t> firsts, impl_->Reserve(headers));
  HostReservation reservation;
  reservation.tier_ = this;
  reservation.headers_.assign(headers.begin(), headers.end());
  reservation.first_pages_ = std::move(firsts);
  return reservation;
}

std::vector<Status> HostTier::Commit(HostReservation reservation) {
  assert(reservation.tier_ == this && "a reservation is committed to the tier that made it");
  std::vector<Status> results = impl_->Commit(reservation.headers_, reservation.first_pages_);
  reservation.tier_ = nullptr;  // its pages are the index's now, or given back
  return results;
}

HostReservation::HostReservation(HostReservation&& other) noexcept
    : tier_(std::exchange(other.tier_, nullptr)),
      headers_(std::move(other.headers_)),
      first_pages_(std::move(other.first_pages_)) {}

HostReservation& HostReservation::operator=(HostReservation&& other) noexcept {
  if (this != &other) {
    Release();
    tier_ = std::exchange(other.tier_, nullptr);
    headers_ = std::move(other.headers_);
    first_pages_ = std::move(other.first_pages_);
  }
  return *this;
}

HostReservation::~HostReservation() { Release(); }

void HostReservation::Release() {
  if (tier_ != nullptr) tier_->impl_->Abandon(first_pages_);
  tier_ = nullptr;
}

void HostReservation::ForEachPiece(size_t i,
                                   const std::function<void(std::span<uint8_t>)>& piece) const {
  if (tier_ != nullptr)
    tier_->impl_->ForEachPiece(first_pages_[i], headers_[i].payload_bytes, piece);
}

void PinnedBlock::ForEachPiece(const std::function<void(std::span<const uint8_t>)>& piece) const {
  if (tier_ != nullptr) tier_->impl_->ForEachPiece(first_page_, header_.payload_bytes, piece);
}

}  // namespace kvtier::storage
