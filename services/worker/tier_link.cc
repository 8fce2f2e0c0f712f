#include "services/worker/tier_link.h"

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include <algorithm>
#include <cstdio>
#include <latch>
#include <thread>

#include "common/thread_name.h"

namespace kvtier::worker {

uint32_t DefaultTierLinkThreads() { return std::min(4u, std::thread::hardware_concurrency() / 4); }

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
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(context_);
  std::vector<std::thread> threads_;  // last: they start once the context exists
};

TierLink::TierLink(TierLinkOptions options) : store_(options.store), threads_(options.threads) {
  if (threads_ > 0) helpers_ = std::make_unique<Helpers>(threads_);
}

TierLink::~TierLink() = default;

void TierLink::ForEachInShares(size_t n, const std::function<void(size_t)>& fn) {
  const size_t shares = std::min<size_t>(n, size_t{threads_} + 1);
  if (shares <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  // Share s: the s-th contiguous run of the blocks (each thread reads a run of the
  // staging or writes one, in order).
  const auto run_share = [&](size_t share) {
    for (size_t i = n * share / shares; i < n * (share + 1) / shares; ++i) fn(i);
  };
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

std::vector<Status> TierLink::OffloadBatch(std::span<const OffloadBlock> blocks) {
  std::vector<Status> taken(blocks.size());
  ForEachInShares(blocks.size(), [&](size_t i) { taken[i] = Offload(blocks[i]); });
  return taken;
}

std::vector<Result<SourceTier>> TierLink::FetchBatch(std::span<const OnboardBlock> blocks) {
  std::vector<Result<SourceTier>> tiers(blocks.size(), Result<SourceTier>(AbortedError("not fetched")));
  ForEachInShares(blocks.size(), [&](size_t i) { tiers[i] = Fetch(blocks[i]); });
  return tiers;
}

std::string StorageFormatTag(const KvLayout& layout, uint64_t format_tag) {
  char hex[20];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(format_tag));
  return layout.Fingerprint() + "|f" + hex;
}

Status TierLink::Offload(const OffloadBlock& block) {
  storage::BlockHeader header;
  header.key = block.key;
  header.parent = block.parent;
  header.first_in_chain = block.first;
  header.format_tag = StorageFormatTag(*block.layout, block.format_tag);
  header.salt_scope = block.salt_scope;
  header.payload_bytes = block.bytes.size();
  header.checksum = storage::PayloadChecksum(block.bytes);
  header.priority = block.priority;
  // Hashed just now from these bytes: the tier need not hash them again.
  const storage::PutItem item{std::move(header), block.bytes, /*checksum_checked=*/true};
  return std::move(store_->PutBatch({&item, 1}).front());
}

}  // namespace kvtier::worker

namespace kvtier::worker {

Result<SourceTier> TierLink::Fetch(const OnboardBlock& block) {
  const std::string format = StorageFormatTag(*block.layout, block.format_tag);
  Result<storage::TieredHit> hit = store_->Get(storage::BlockRef{block.key, format, block.salt_scope}, block.out);
  if (!hit.ok()) return hit.status();
  if (hit->header.payload_bytes != block.out.size()) {
    // The format tag pins the layout, so this is a corrupt store, not a caller's error.
    return DataLossError("stored block " + block.key.ToHex() + " has " + std::to_string(hit->header.payload_bytes) +
                         " bytes; its layout needs " + std::to_string(block.out.size()));
  }
  return hit->tier == storage::TierKind::kHost ? SourceTier::kHost : SourceTier::kDisk;
}

}  // namespace kvtier::worker
