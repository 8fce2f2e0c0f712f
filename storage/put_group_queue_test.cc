#include "storage/put_group_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "common/mutex.h"
#include "storage/testing/blocks.h"

namespace kvtier::storage {
namespace {

using testing::MakeBlock;
using testing::TestBlock;

// A batch of blocks `ids`, each of `bytes` bytes, with every check passed.
struct Batch {
  Batch(std::initializer_list<uint64_t> ids, size_t bytes) {
    for (uint64_t id : ids) blocks.push_back(MakeBlock(id, bytes));
    for (const TestBlock& block : blocks) items.push_back({block.header, block.payload});
    results.resize(items.size());
  }
  std::vector<TestBlock> blocks;
  std::vector<PutItem> items;
  std::vector<Status> results;
};

// What the commits saw: each group's block ids in order, and the thread that ran it. The
// first group's commit waits until `release` is set, so that batches queue behind it.
class RecordingCommit {
 public:
  void operator()(std::span<const PutItem> items, std::vector<Status>& results) {
    MutexLock lock(mu_);
    std::vector<uint64_t> ids;
    for (const PutItem& item : items) ids.push_back(item.header.key.lo);
    groups_.push_back(ids);
    if (groups_.size() == 1) released_.Wait(lock, [&]() KVTIER_REQUIRES(mu_) { return release_; });
    // The outcome names the block, so each caller can check it got its own items' back.
    for (size_t i = 0; i < items.size(); ++i) {
      if (results[i].ok()) results[i] = AlreadyExistsError("block " + std::to_string(ids[i]));
    }
  }
  void Release() {
    MutexLock lock(mu_);
    release_ = true;
    released_.NotifyAll();
  }
  std::vector<std::vector<uint64_t>> groups() const {
    MutexLock lock(mu_);
    return groups_;
  }

 private:
  mutable Mutex mu_;
  CondVar released_;
  bool release_ KVTIER_GUARDED_BY(mu_) = false;
  std::vector<std::vector<uint64_t>> groups_ KVTIER_GUARDED_BY(mu_);
};

// Waits (at most 10 s) until `queue` holds `batches`.
bool WaitQueued(const PutGroupQueue& queue, size_t batches) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (queue.queued() != batches) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Commits `batch` on a thread of its own; the future is ready once Commit returned.
std::future<void> CommitAsync(PutGroupQueue& queue, Batch& batch, RecordingCommit& commit) {
  return std::async(std::launch::async, [&] {
    queue.Commit(batch.items, batch.results,
                 [&](auto items, auto& results) { commit(items, results); });
  });
}

TEST(PutGroupQueueTest, ALoneBatchIsCommittedOnItsCallersThread) {
  PutGroupQueue queue(1 << 20);
  Batch batch({1, 2}, 100);
  std::thread::id committed_on;
  queue.Commit(batch.items, batch.results,
               [&](std::span<const PutItem> items, std::vector<Status>& results) {
                 committed_on = std::this_thread::get_id();
                 ASSERT_EQ(items.size(), 2u);
                 EXPECT_EQ(items.data(), batch.items.data());  // the caller's items, not a copy
                 results[1] = InternalError("block 2 not written");
               });
  EXPECT_EQ(committed_on, std::this_thread::get_id());
  EXPECT_TRUE(batch.results[0].ok());
  EXPECT_EQ(batch.results[1].code(), StatusCode::kInternal);
  EXPECT_EQ(queue.totals().groups, 1u);
  EXPECT_EQ(queue.totals().batches, 1u);
  EXPECT_EQ(queue.queued(), 0u);
}

TEST(PutGroupQueueTest, BatchesQueuedBehindACommitGoTogetherInTheirOrder) {
  PutGroupQueue queue(1 << 20);
  RecordingCommit commit;
  Batch a({1}, 100), b({2, 3}, 100), c({4}, 100), d({5, 6}, 100);
  b.results[1] = InvalidArgumentError("block 3 failed its check");  // passed through as is
  // a's commit is under way (and waits); b, c and d queue behind it, in that order.
  std::future<void> a_done = CommitAsync(queue, a, commit);
  ASSERT_TRUE(WaitQueued(queue, 1));
  std::future<void> b_done = CommitAsync(queue, b, commit);
  ASSERT_TRUE(WaitQueued(queue, 2));
  std::future<void> c_done = CommitAsync(queue, c, commit);
  ASSERT_TRUE(WaitQueued(queue, 3));
  std::future<void> d_done = CommitAsync(queue, d, commit);
  ASSERT_TRUE(WaitQueued(queue, 4));
  commit.Release();
  a_done.get(), b_done.get(), c_done.get(), d_done.get();

  EXPECT_EQ(commit.groups(), (std::vector<std::vector<uint64_t>>{{1}, {2, 3, 4, 5, 6}}));
  EXPECT_EQ(queue.totals().groups, 2u);
  EXPECT_EQ(queue.totals().batches, 4u);
  // Each caller has its own items' outcomes back, the failed check untouched.
  EXPECT_EQ(a.results[0].message(), "block 1");
  EXPECT_EQ(b.results[0].message(), "block 2");
  EXPECT_EQ(b.results[1].code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.results[0].message(), "block 4");
  EXPECT_EQ(d.results[0].message(), "block 5");
  EXPECT_EQ(d.results[1].message(), "block 6");
  EXPECT_EQ(queue.queued(), 0u);
}

TEST(PutGroupQueueTest, AGroupStopsAtItsByteBudgetAndAtARepeatedBlock) {
  // 2 KiB a group: a, b and d are 1 KiB, c 2 KiB; e repeats block 5, which d puts.
  PutGroupQueue queue(2048);
  RecordingCommit commit;
  Batch a({1}, 1024), b({2}, 1024), c({3, 4}, 1024), d({5}, 1024), e({5}, 1024), f({6}, 1024);
  std::vector<std::future<void>> done;
  done.push_back(CommitAsync(queue, a, commit));
  size_t queued = 1;
  ASSERT_TRUE(WaitQueued(queue, queued));
  for (Batch* batch : {&b, &c, &d, &e, &f}) {
    done.push_back(CommitAsync(queue, *batch, commit));
    ASSERT_TRUE(WaitQueued(queue, ++queued));
  }
  commit.Release();
  for (std::future<void>& batch_done : done) batch_done.get();

  // b alone (c would pass 2 KiB), c alone (2 KiB), d alone (e repeats block 5), then e and f.
  EXPECT_EQ(commit.groups(), (std::vector<std::vector<uint64_t>>{{1}, {2}, {3, 4}, {5}, {5, 6}}));
  EXPECT_EQ(queue.totals().groups, 5u);
  EXPECT_EQ(queue.totals().batches, 6u);
  EXPECT_EQ(e.results[0].message(), "block 5");
}

TEST(PutGroupQueueTest, ABatchOverTheBudgetIsCommittedAlone) {
  PutGroupQueue queue(100);
  Batch big({1, 2}, 1000);
  queue.Commit(big.items, big.results,
               [](std::span<const PutItem> items, std::vector<Status>& results) {
                 results.assign(items.size(), Status::Ok());
               });
  EXPECT_TRUE(big.results[0].ok() && big.results[1].ok());
  EXPECT_EQ(queue.totals().groups, 1u);
}

}  // namespace
}  // namespace kvtier::storage
