#include "services/worker/offload_queue.h"

#include <algorithm>
#include <cstring>

#include <sys/resource.h>
#include <unistd.h>

#include "common/mutex.h"
#include "common/thread_name.h"

namespace kvtier::worker {

storage::BlockHeader StoredHeader(const OffloadBlock& block, const storage::FormatTag& format) {
  return storage::BlockHeader{.key = block.key,
                              .parent = block.parent,
                              .first_in_chain = block.first,
                              .format_tag = format,
                              .salt_scope = block.salt_scope,
                              .payload_bytes = block.bytes.size(),
                              .priority = block.priority};
}

OffloadQueue::OffloadQueue(OffloadQueueOptions options)
    : store_(options.store), capacity_bytes_(options.capacity_bytes), thread_([this] { Run(); }) {}

OffloadQueue::~OffloadQueue() {
  {
    MutexLock lock(mu_);
    stop_ = true;  // Run stores what is pending first
  }
  work_.NotifyOne();
  thread_.join();
}

std::unique_ptr<OffloadQueue::Staged> OffloadQueue::TakeBuffer(size_t bytes) {
  const auto same_size = std::find_if(free_.begin(), free_.end(),
                                      [&](const auto& s) { return s->bytes.size() == bytes; });
  if (same_size != free_.end()) {
    std::unique_ptr<Staged> staged = std::move(*same_size);
    *same_size = std::move(free_.back());
    free_.pop_back();
    return staged;
  }
  // Buffers of other sizes (another pool's layout) give way to this one.
  while (allocated_bytes_ + bytes > capacity_bytes_ && !free_.empty()) {
    allocated_bytes_ -= free_.back()->bytes.size();
    free_.pop_back();
  }
  if (allocated_bytes_ + bytes > capacity_bytes_) return nullptr;
  allocated_bytes_ += bytes;
  auto staged = std::make_unique<Staged>();
  staged->bytes.resize(bytes);
  return staged;
}

OffloadQueue::Staged* OffloadQueue::FindLocked(const storage::BlockRef& ref) {
  for (auto [it, end] = staged_.equal_range(ref.key); it != end; ++it) {
    const Staged* staged = it->second;
    if (staged->header.format_tag == ref.format_tag && staged->header.salt_scope == ref.salt_scope)
      return it->second;
  }
  return nullptr;
}

std::vector<bool> OffloadQueue::Stage(std::span<const OffloadBlock> blocks,
                                      std::span<const storage::FormatTag* const> formats) {
  std::vector<bool> staged(blocks.size(), false);
  {
    MutexLock lock(mu_);
    for (size_t i = 0; i < blocks.size(); ++i) {
      const OffloadBlock& block = blocks[i];
      if (formats[i] == nullptr) continue;
      if (Staged* existing = FindLocked({block.key, *formats[i], block.salt_scope});
          existing != nullptr) {
        existing->withdrawn = false;  // evicted again: no pool holds it now
        staged[i] = true;             // the same block (a key's bytes never change) is on its way
        continue;
      }
      std::unique_ptr<Staged> buffer = TakeBuffer(block.bytes.size());
      if (buffer == nullptr) {
        ++stats_.no_room;
        continue;
      }
      // The copy runs under the lock: it is what the caller waits for anyway, and readers
      // of the staging are rare (an onboard right after an eviction).
      std::memcpy(buffer->bytes.data(), block.bytes.data(), block.bytes.size());
      buffer->header = StoredHeader(block, *formats[i]);
      buffer->withdrawn = false;
      if (buffer->node.empty()) {
        staged_.emplace(block.key, buffer.get());
      } else {  // the entry it had before, under its new key
        buffer->node.key() = block.key;
        buffer->node.mapped() = buffer.get();
        staged_.insert(std::move(buffer->node));
      }
      pending_.push_back(std::move(buffer));
      staged[i] = true;
      ++stage_seq_;
      ++stats_.staged;
      stats_.staged_bytes += block.bytes.size();
    }
  }
  work_.NotifyOne();
  return staged;
}

bool OffloadQueue::CopyStaged(const storage::BlockRef& ref, std::span<uint8_t> out) {
  MutexLock lock(mu_);
  const Staged* staged = FindLocked(ref);
  if (staged == nullptr || staged->bytes.size() != out.size()) return false;
  std::memcpy(out.data(), staged->bytes.data(), out.size());
  ++stats_.served;
  return true;
}

void OffloadQueue::Withdraw(std::span<const storage::BlockRef> refs) {
  MutexLock lock(mu_);
  // The thread, woken when the block was staged, drops it when it takes the pending
  // blocks, or moves it out once stored if it is storing it already.
  for (const storage::BlockRef& ref : refs) {
    if (Staged* staged = FindLocked(ref); staged != nullptr) staged->withdrawn = true;
  }
}

void OffloadQueue::Flush() {
  MutexLock lock(mu_);
  const uint64_t target = stage_seq_;
  idle_.Wait(lock, [&]() KVTIER_REQUIRES(mu_) { return settled_seq_ >= target; });
}

OffloadQueueStats OffloadQueue::Stats() const {
  MutexLock lock(mu_);
  OffloadQueueStats stats = stats_;
  stats.capacity_bytes = capacity_bytes_;
  return stats;
}

void OffloadQueue::Run() {
  NameThisThread("kvt-offload");
  // Behind the callers, also for the processor: with few cores, this thread at full
  // priority took turns from the coordinator's lookups (their tail, on 2 cores:
  // docs/history/benchmarks-2026-11.md#offloads-stored-behind-the-allocation-2026-11-27-stop-43).
  // Where it falls behind, its staging fills and offloads are stored by their callers again.
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
  std::vector<std::unique_ptr<Staged>> batch;
  std::vector<storage::PutItem> items;
  for (;;) {
    {
      MutexLock lock(mu_);
      work_.Wait(lock, [&]() KVTIER_REQUIRES(mu_) { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping, and everything staged is stored
      TakePendingLocked(batch);
    }
    if (batch.empty()) {
      idle_.NotifyAll();  // all of it was withdrawn
      continue;
    }
    StoreBatch(batch, items);
  }
}

void OffloadQueue::TakePendingLocked(std::vector<std::unique_ptr<Staged>>& batch) {
  // All that waits goes as one batch: the host tier makes room for it at once, and what
  // that displaces goes down to disk in one write.
  for (std::unique_ptr<Staged>& staged : pending_) {
    if (staged->withdrawn) {
      ++stats_.withdrawn;
      ++settled_seq_;
      ReleaseLocked(std::move(staged));
      continue;
    }
    batch.push_back(std::move(staged));
  }
  pending_.clear();
}

void OffloadQueue::ReleaseLocked(std::unique_ptr<Staged> staged) {
  stats_.staged_bytes -= staged->bytes.size();
  auto it = staged_.find(staged->header.key);  // the first of its key's entries
  while (it->second != staged.get()) ++it;     // equal keys are adjacent
  staged->node = staged_.extract(it);
  free_.push_back(std::move(staged));
}

void OffloadQueue::StoreBatch(std::vector<std::unique_ptr<Staged>>& batch,
                              std::vector<storage::PutItem>& items) {
  if (items.size() < batch.size()) items.resize(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    const Staged& staged = *batch[i];
    storage::PutItem& item = items[i];
    item.header = staged.header;
    item.header.checksum = storage::PayloadChecksum(staged.bytes);
    item.payload = staged.bytes;
    item.checksum_checked = true;  // hashed just now from these bytes
  }
  // Behind: the batch makes its own room, and the room the store keeps free is left to
  // the worker's own puts (victims the staging had no room for), which it waits for.
  const std::vector<Status> stored =
      store_->PutBatch(std::span(items).first(batch.size()), storage::PutRoom::kOwn);
  MoveOutWithdrawn(batch, stored);
  {
    MutexLock lock(mu_);
    for (size_t i = 0; i < batch.size(); ++i) {
      std::unique_ptr<Staged>& staged = batch[i];
      if (staged->moved_out && !staged->withdrawn) {
        pending_.push_back(std::move(staged));  // evicted again as it left the host tier
        continue;
      }
      ++(!stored[i].ok() ? stats_.failed : staged->moved_out ? stats_.withdrawn : stats_.stored);
      ++settled_seq_;
      // Only now, with the store holding it (or a pool), does the block leave the staged set.
      ReleaseLocked(std::move(staged));
    }
  }
  batch.clear();
  idle_.NotifyAll();
}

void OffloadQueue::MoveOutWithdrawn(std::vector<std::unique_ptr<Staged>>& batch,
                                    std::span<const Status> stored) {
  {
    MutexLock lock(mu_);
    for (size_t i = 0; i < batch.size(); ++i)
      batch[i]->moved_out = batch[i]->withdrawn && stored[i].ok();
  }
  // Outside the queue's lock (a leaf). Each stays staged meanwhile: one a pool evicts
  // again now is staged again (its withdrawal cancelled), and StoreBatch queues it anew.
  for (const std::unique_ptr<Staged>& staged : batch) {
    if (!staged->moved_out) continue;
    const storage::BlockHeader& header = staged->header;
    // kNotFound: the landing moved it out already, or the host tier sent it to disk.
    (void)store_->host_pages().MoveOut({header.key, header.format_tag, header.salt_scope});
  }
}

}  // namespace kvtier::worker
