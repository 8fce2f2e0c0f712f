#include "services/worker/tier_link.h"

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <latch>
#include <optional>
#include <thread>

#include "common/thread_name.h"

namespace kvtier::worker {

uint32_t TierLinkThreads(uint32_t configured) {
  return configured != 0 ? configured : DefaultTierLinkThreads(std::thread::hardware_concurrency());
}

// Half the threads from 16 up: on a 16-core machine 8 helpers cut the GPU replay's tier
// hand-overs by a quarter against 4, and 12 gained little more. A quarter below that,
// none under 4: on 2 cores a helper took turns from the lookups
// (docs/history/benchmarks-2026-11.md#eight-tier-helpers-on-16-cores-2026-11-27-stop-42).
uint32_t DefaultTierLinkThreads(uint32_t hardware_threads) {
  return hardware_threads >= 16 ? std::min(8u, hardware_threads / 2) : hardware_threads / 4;
}

class TierLink::Helpers {
 public:
  explicit Helpers(uint32_t threads) {
    for (uint32_t i = 0; i < threads; ++i) {
      threads_.emplace_back([this, i] {
        NameThisThread("kvt-tier-" + std::to_string(i));
        context_.run();
      });
    }
  }
  ~Helpers() {
    work_.reset();  // every share was waited for: nothing is left to run
    for (std::thread& thread : threads_) thread.join();
  }
  asio::io_context& context() { return context_; }

 private:
  asio::io_context context_;
  asio::executor_work_guard<asio::io_context::executor_type> work_ =
      asio::make_work_guard(context_);
  std::vector<std::thread> threads_;  // last: they start once the context exists
};

TierLink::TierLink(TierLinkOptions options) : store_(options.store), threads_(options.threads) {
  if (threads_ > 0) helpers_ = std::make_unique<Helpers>(threads_);
  if (options.staging_bytes > 0) {
    queue_ = std::make_unique<OffloadQueue>(
        OffloadQueueOptions{.store = store_, .capacity_bytes = options.staging_bytes});
  }
}

void TierLink::Flush() {
  if (queue_) queue_->Flush();
}

OffloadQueueStats TierLink::StagingStats() const {
  return queue_ ? queue_->Stats() : OffloadQueueStats{};
}

TierLink::~TierLink() = default;

void TierLink::ForEachShare(size_t n, const std::function<void(size_t, size_t)>& fn) {
  const size_t shares = std::min<size_t>(n, size_t{threads_} + 1);
  if (shares <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  // Share s: the s-th contiguous run of the blocks (each thread reads a run of the
  // staging or writes one, in order).
  const auto run_share = [&](size_t share) { fn(n * share / shares, n * (share + 1) / shares); };
  std::latch done(static_cast<std::ptrdiff_t>(shares - 1));
  for (size_t share = 1; share < shares; ++share) {
    asio::post(helpers_->context(), [&, share] {
      run_share(share);
      done.count_down();
    });
  }
  run_share(0);
  done.wait();
}

namespace {

// The storage format tags of a batch's blocks, each made once per run of blocks with the
// same layout and engine tag (a batch's blocks all share them): KvLayout::Fingerprint
// builds its string piece by piece, which per block was 3% of a worker's thread.
class FormatTags {
 public:
  // The tag's text, which a BlockRef views.
  const std::string& Text(const KvLayout* layout, uint64_t format_tag) {
    return At(layout, format_tag).text;
  }
  // The tag interned for the headers an offload stores (storage::FormatTag::Intern).
  // Engines choose their format tags, so the table they go into is bounded: a tag past
  // it is kResourceExhausted, and its blocks are not stored.
  const Result<storage::FormatTag>& Interned(const KvLayout* layout, uint64_t format_tag) {
    Entry& entry = At(layout, format_tag);
    if (!entry.interned) entry.interned = storage::FormatTag::Intern(entry.text);
    return *entry.interned;
  }

 private:
  struct Entry {
    std::string text;
    std::optional<Result<storage::FormatTag>> interned;  // once asked for
  };
  Entry& At(const KvLayout* layout, uint64_t format_tag) {
    if (tags_.empty() || layout != layout_ || format_tag != format_tag_) {
      tags_.push_back({StorageFormatTag(*layout, format_tag), std::nullopt});
      layout_ = layout;
      format_tag_ = format_tag;
    }
    return tags_.back();
  }

  std::deque<Entry> tags_;  // references to them stay valid as it grows
  const KvLayout* layout_ = nullptr;
  uint64_t format_tag_ = 0;
};

}  // namespace

// Each share goes to the store as one PutBatch: the host tier makes room for all of its
// blocks at once, so their victims go down to disk together (one disk batch for many
// blocks, not one each: a block at a time, `make run`'s replay made 217,646 disk writes).
std::vector<Status> TierLink::OffloadBatch(std::span<const OffloadBlock> blocks) {
  std::vector<Status> taken(blocks.size());
  FormatTags tags;
  std::vector<const storage::FormatTag*> formats;  // null: not stored (taken says why)
  formats.reserve(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Result<storage::FormatTag>& tag = tags.Interned(blocks[i].layout, blocks[i].format_tag);
    formats.push_back(tag.ok() ? &*tag : nullptr);
    if (!tag.ok()) taken[i] = tag.status();
  }
  std::vector<size_t> now;  // stored before returning: all, or those the staging had no room for
  now.reserve(blocks.size());
  const std::vector<bool> staged = queue_ ? queue_->Stage(blocks, formats) : std::vector<bool>{};
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (formats[i] != nullptr && (staged.empty() || !staged[i])) now.push_back(i);
  }
  StoreNow(blocks, formats, now, taken);
  return taken;
}

void TierLink::StoreNow(std::span<const OffloadBlock> blocks,
                        std::span<const storage::FormatTag* const> formats,
                        std::span<const size_t> which, std::vector<Status>& taken) {
  std::vector<storage::PutItem> items(which.size());
  ForEachShare(which.size(), [&](size_t begin, size_t end) {
    for (size_t k = begin; k < end; ++k)
      items[k] = StoredItem(blocks[which[k]], *formats[which[k]]);
    std::vector<Status> stored = store_->PutBatch(std::span(items).subspan(begin, end - begin));
    for (size_t k = begin; k < end; ++k) taken[which[k]] = std::move(stored[k - begin]);
  });
}

std::vector<Result<SourceTier>> TierLink::FetchBatch(std::span<const OnboardBlock> blocks) {
  std::vector<Result<SourceTier>> tiers(blocks.size(),
                                        Result<SourceTier>(AbortedError("not fetched")));
  FormatTags tags;  // the refs' format tags point into it
  std::vector<storage::BlockRef> refs;
  std::vector<std::span<uint8_t>> outs;
  std::vector<size_t> from_store;  // positions in `blocks`: those not in the staging
  refs.reserve(blocks.size());
  outs.reserve(blocks.size());
  from_store.reserve(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    const OnboardBlock& block = blocks[i];
    const storage::BlockRef ref{block.key, tags.Text(block.layout, block.format_tag),
                                block.salt_scope};
    if (queue_ && queue_->CopyStaged(ref, block.out)) {
      tiers[i] = SourceTier::kHost;  // on its way there
      continue;
    }
    refs.push_back(ref);
    outs.push_back(block.out);
    from_store.push_back(i);
  }
  // Each share is one GetBatch. Its disk hits stay on disk only: the pool holds them now,
  // and offloads them to the host tier when it evicts them (PromoteDiskHits).
  ForEachShare(refs.size(), [&](size_t begin, size_t end) {
    std::vector<Result<storage::TieredHit>> hits = store_->GetBatch(
        std::span(refs).subspan(begin, end - begin), std::span(outs).subspan(begin, end - begin),
        storage::PromoteDiskHits::kNo);
    for (size_t k = begin; k < end; ++k)
      tiers[from_store[k]] = SourceOf(std::move(hits[k - begin]), blocks[from_store[k]]);
  });
  return tiers;
}

namespace {

// The end of a storage format tag: "|f" and the engines' format tag in 16 hex digits.
struct FormatTagSuffix {
  explicit FormatTagSuffix(uint64_t format_tag) {
    std::snprintf(text, sizeof(text), "|f%016llx", static_cast<unsigned long long>(format_tag));
  }
  std::string_view view() const { return {text, kLength}; }
  static constexpr size_t kLength = 18;
  char text[kLength + 1];
};

}  // namespace

std::string StorageFormatTag(const KvLayout& layout, uint64_t format_tag) {
  return layout.Fingerprint().append(FormatTagSuffix(format_tag).view());
}

bool IsStorageFormatTag(std::string_view tag, std::string_view fingerprint, uint64_t format_tag) {
  return tag.size() == fingerprint.size() + FormatTagSuffix::kLength &&
         tag.starts_with(fingerprint) && tag.ends_with(FormatTagSuffix(format_tag).view());
}

storage::PutItem TierLink::StoredItem(const OffloadBlock& block, const storage::FormatTag& format) {
  storage::BlockHeader header = StoredHeader(block, format);
  header.checksum = storage::PayloadChecksum(block.bytes);
  // Hashed just now from these bytes: the tier need not hash them again.
  return storage::PutItem{std::move(header), block.bytes, /*checksum_checked=*/true};
}

Status TierLink::Offload(const OffloadBlock& block) {
  return std::move(OffloadBatch({&block, 1}).front());
}

}  // namespace kvtier::worker

namespace kvtier::worker {

Result<SourceTier> TierLink::Fetch(const OnboardBlock& block) {
  return std::move(FetchBatch({&block, 1}).front());
}

void TierLink::Landed(std::span<const OnboardBlock> blocks, std::span<const SourceTier> tiers) {
  FormatTags tags;  // the refs' format tags point into it
  std::vector<storage::BlockRef> refs;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (tiers[i] != SourceTier::kHost) continue;
    const OnboardBlock& block = blocks[i];
    refs.push_back({block.key, tags.Text(block.layout, block.format_tag), block.salt_scope});
  }
  // A block answered from the staging is not stored at all, if it still waits there.
  if (queue_) queue_->Withdraw(refs);
  for (const storage::BlockRef& ref : refs) {
    // kNotFound: the block was answered from the staging, or is on its way down to disk.
    (void)store_->host_pages().MoveOut(ref);
  }
}

Result<SourceTier> TierLink::SourceOf(Result<storage::TieredHit> hit, const OnboardBlock& block) {
  if (!hit.ok()) return hit.status();
  if (hit->header.payload_bytes != block.out.size()) {
    // The format tag pins the layout, so this is a corrupt store, not a caller's error.
    return DataLossError("stored block " + block.key.ToHex() + " has " +
                         std::to_string(hit->header.payload_bytes) + " bytes; its layout needs " +
                         std::to_string(block.out.size()));
  }
  return hit->tier == kvtier::Tier::kHost ? SourceTier::kHost : SourceTier::kDisk;
}

}  // namespace kvtier::worker
