#include "storage/put_group_queue.h"
#include "common/mutex.h"

#include <algorithm>
#include <set>
#include <string_view>
#include <utility>

namespace kvtier::storage {

void PutGroupQueue::Commit(std::span<const PutItem> items, std::vector<Status>& results,
                           const CommitFn& commit) {
  Waiter self;
  self.items = items;
  self.results = &results;
  for (const PutItem& item : items) self.bytes += item.payload.size();

  MutexLock lock(mu_);
  queue_.push_back(&self);
  self.woken.Wait(lock,
                  [&]() KVTIER_REQUIRES(mu_) { return self.done || queue_.front() == &self; });
  if (self.done) return;  // a leader committed this batch with its group

  const std::vector<Waiter*> group = TakeGroupLocked();
  lock.Unlock();
  CommitGroup(group, commit);
  lock.Lock();
  ++totals_.groups;
  totals_.batches += group.size();
  for (Waiter* member : group) {
    queue_.pop_front();
    // Woken under the lock: once it sees `done` the member returns and its Waiter (on its
    // stack) is gone, so nothing may touch it after the lock is let go.
    if (member != &self) {
      member->done = true;
      member->woken.NotifyOne();
    }
  }
  if (!queue_.empty()) queue_.front()->woken.NotifyOne();  // the next leader
}

// The leader's batch and those queued behind it, while they fit in max_group_bytes_ and
// repeat no block of the group (the header says why).
std::vector<PutGroupQueue::Waiter*> PutGroupQueue::TakeGroupLocked() const {
  std::vector<Waiter*> group{queue_.front()};
  uint64_t bytes = queue_.front()->bytes;
  std::set<std::pair<std::string_view, BlockKey>> blocks;
  const auto add_blocks = [&](const Waiter& waiter) {
    for (const PutItem& item : waiter.items)
      blocks.emplace(item.header.format_tag, item.header.key);
  };
  add_blocks(*group[0]);
  for (size_t i = 1; i < queue_.size() && bytes + queue_[i]->bytes <= max_group_bytes_; ++i) {
    const Waiter& next = *queue_[i];
    const bool repeats =
        std::any_of(next.items.begin(), next.items.end(), [&](const PutItem& item) {
          return blocks.contains({item.header.format_tag, item.header.key});
        });
    if (repeats) break;
    group.push_back(queue_[i]);
    bytes += next.bytes;
    add_blocks(next);
  }
  return group;
}

void PutGroupQueue::CommitGroup(std::span<Waiter* const> group, const CommitFn& commit) {
  if (group.size() == 1) return commit(group[0]->items, *group[0]->results);
  // The members' items and results end to end, then each member's results back.
  std::vector<PutItem> items;
  std::vector<Status> results;
  for (const Waiter* member : group) {
    items.insert(items.end(), member->items.begin(), member->items.end());
    results.insert(results.end(), member->results->begin(), member->results->end());
  }
  commit(items, results);
  size_t at = 0;
  for (Waiter* member : group) {
    for (Status& result : *member->results) result = std::move(results[at++]);
  }
}

size_t PutGroupQueue::queued() const {
  MutexLock lock(mu_);
  return queue_.size();
}

PutGroupQueue::Totals PutGroupQueue::totals() const {
  MutexLock lock(mu_);
  return totals_;
}

}  // namespace kvtier::storage
