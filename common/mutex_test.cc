#include "common/mutex.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

using namespace std::chrono_literals;

TEST(MutexTest, ThreadsIncrementingUnderTheLockLoseNoIncrement) {
  Mutex mu;
  int count = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        MutexLock lock(mu);
        const int seen = count;
        std::this_thread::yield();  // another thread in here now would write over this one
        count = seen + 1;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  MutexLock lock(mu);
  EXPECT_EQ(count, 8000);
}

TEST(MutexTest, AnUnlockedScopeLetsAnotherThreadTakeTheMutex) {
  Mutex mu;
  MutexLock lock(mu);
  lock.Unlock();
  // Another thread can take it only if Unlock let it go.
  std::thread other([&] { MutexLock taken(mu); });
  other.join();
  lock.Lock();  // and ours is held again until the scope ends
  std::atomic<bool> got_it{false};
  std::thread blocked([&] {
    MutexLock taken(mu);
    got_it = true;
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(got_it) << "the mutex is held again after Lock()";
  lock.Unlock();
  blocked.join();
  EXPECT_TRUE(got_it);
}

TEST(CondVarTest, AWaiterWakesOnceWhatItWaitsForIsTrue) {
  Mutex mu;
  CondVar changed;
  int stage = 0;  // under mu
  std::thread waiter([&] {
    MutexLock lock(mu);
    changed.Wait(lock, [&]() KVTIER_REQUIRES(mu) { return stage == 2; });
    stage = 3;  // seen 2, under the lock
    changed.NotifyAll();
  });
  for (int next : {1, 2}) {  // stage 1 wakes the waiter, which waits on
    MutexLock lock(mu);
    stage = next;
    changed.NotifyAll();
  }
  {
    MutexLock lock(mu);
    EXPECT_TRUE(changed.WaitFor(lock, 10s, [&]() KVTIER_REQUIRES(mu) { return stage == 3; }));
  }
  waiter.join();
}

TEST(CondVarTest, WaitForSaysFalseWhenTheTimeoutPassesFirst) {
  Mutex mu;
  CondVar never;
  MutexLock lock(mu);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(never.WaitFor(lock, 20ms, [] { return false; }));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 20ms);
}

TEST(SharedMutexTest, ReadersHoldItTogether) {
  SharedMutex mu;
  std::atomic<int> inside{0};
  std::atomic<bool> both_seen{false};
  auto reader = [&] {
    ReaderLock lock(mu);
    ++inside;
    // Both readers are inside at once only if neither excludes the other.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (inside.load() < 2 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    if (inside.load() == 2) both_seen = true;
  };
  std::thread first(reader), second(reader);
  first.join();
  second.join();
  EXPECT_TRUE(both_seen);
}

TEST(SharedMutexTest, AWriterExcludesReaders) {
  SharedMutex mu;
  std::atomic<bool> read{false};
  std::thread reader;
  {
    WriterLock lock(mu);
    reader = std::thread([&] {
      ReaderLock shared(mu);
      read = true;
    });
    std::this_thread::sleep_for(20ms);
    EXPECT_FALSE(read) << "a reader got in while the writer held the mutex";
  }
  reader.join();
  EXPECT_TRUE(read);
}

}  // namespace
}  // namespace kvtier
