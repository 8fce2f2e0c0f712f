// PutGroupQueue: group commit for a tier's put batches.
//
// A durable put pays a fixed cost per write (under the disk tier's kFsync, an fdatasync
// of the payloads and a sync of the headers' WAL), and a tier that writes one batch at a
// time pays it once per batch however many threads are putting. Here concurrent batches
// queue instead: the first in line, the leader, takes the batches queued behind it (up to
// `max_group_bytes` of payload, its own always) and commits them as one, on its own
// thread; then it hands each member its results and wakes it. The batches that came
// meanwhile queue for the next group. A thread putting alone waits for no other: its
// batch is a group of one, committed as before. LevelDB's and RocksDB's writers queue
// the same way.
//
// What a group changes for a member: its items are committed with the others', in the
// order the batches queued, so a failure of the group's write (a full disk, an I/O error)
// fails every member's items that passed their checks, as it fails a whole batch. A
// batch that names a block the group names already is left for the next group (a tier
// stores a block repeated within one batch once, as its first item says, so in a group
// a later put of it would not refresh its priority and retention as it does alone).
//
// Thread safety: Commit may be called from any number of threads at once. The queue's
// mutex is a leaf: no other lock is taken under it, and `commit` runs outside it.
//
// REQUIRES: max_group_bytes > 0; results.size() == items.size() in Commit. The queue
// outlives every Commit call.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "storage/tier.h"

namespace kvtier::storage {

class PutGroupQueue {
 public:
  // Commits a group's items: `results` holds one entry per item, each item's check so far;
  // it sets the outcome of every item whose check passed. Called by one thread at a time.
  using CommitFn =
      std::function<void(std::span<const PutItem> items, std::vector<Status>& results)>;

  explicit PutGroupQueue(uint64_t max_group_bytes) : max_group_bytes_(max_group_bytes) {}
  PutGroupQueue(const PutGroupQueue&) = delete;
  PutGroupQueue& operator=(const PutGroupQueue&) = delete;

  // Returns once `items` are committed, by `commit` on this thread or on a leader's: then
  // `results` (one per item, as CommitFn's) holds their outcomes.
  void Commit(std::span<const PutItem> items, std::vector<Status>& results, const CommitFn& commit);

  // Batches queued now, the one being committed included (a gauge; it changes as you read it).
  size_t queued() const;
  // Batches committed, and the group commits they went out in: their ratio is the mean
  // group.
  struct Totals {
    uint64_t batches = 0;
    uint64_t groups = 0;
  };
  Totals totals() const;

 private:
  // A batch waiting in the queue, on its caller's stack.
  struct Waiter {
    std::span<const PutItem> items;
    std::vector<Status>* results = nullptr;
    uint64_t bytes = 0;
    bool done = false;
    CondVar woken;
  };

  std::vector<Waiter*> TakeGroupLocked() const KVTIER_REQUIRES(mu_);
  static void CommitGroup(std::span<Waiter* const> group, const CommitFn& commit);

  const uint64_t max_group_bytes_;
  mutable Mutex mu_;
  std::deque<Waiter*> queue_ KVTIER_GUARDED_BY(mu_);  // front: the leader, committing
  Totals totals_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier::storage
