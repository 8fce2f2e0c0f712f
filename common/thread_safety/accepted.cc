// Correct uses of common/mutex.h: clang's -Wthread-safety must accept every one.
#include "common/mutex.h"

namespace kvtier {

class Counter {
 public:
  void Add(int n) {
    MutexLock lock(mu_);
    AddLocked(n);
  }
  int WaitForAtLeast(int n) {
    MutexLock lock(mu_);
    changed_.Wait(lock, [&]() KVTIER_REQUIRES(mu_) { return count_ >= n; });
    return count_;
  }
  int AddOutsideTheLock(int n) {
    MutexLock lock(mu_);
    const int before = count_;
    lock.Unlock();
    lock.Lock();  // held again: count_ may be touched
    count_ += n;
    return before;
  }
  int Sum() const {
    MutexLock lock(mu_);
    const auto all = [&] {
      mu_.AssertHeld();  // called below, under the lock
      return count_;
    };
    return all();
  }

 private:
  void AddLocked(int n) KVTIER_REQUIRES(mu_) {
    count_ += n;
    changed_.NotifyAll();
  }

  mutable Mutex mu_;
  CondVar changed_;
  int count_ KVTIER_GUARDED_BY(mu_) = 0;
};

class Table {
 public:
  int Read() {
    ReaderLock lock(mu_);
    return value_;
  }
  void Write(int value) {
    WriterLock lock(mu_);
    value_ = value;
  }

 private:
  SharedMutex mu_;
  int value_ KVTIER_GUARDED_BY(mu_) = 0;
};

// Two mutexes taken in their declared order, as DiskTier takes its own.
class OrderedStore {
 public:
  int Put() {
    MutexLock write(write_mu_);
    ++writes_;
    MutexLock index(index_mu_);
    return ++entries_;
  }

 private:
  Mutex write_mu_;
  Mutex index_mu_ KVTIER_ACQUIRED_AFTER(write_mu_);
  int writes_ KVTIER_GUARDED_BY(write_mu_) = 0;
  int entries_ KVTIER_GUARDED_BY(index_mu_) = 0;
};

int Use() {
  OrderedStore ordered;
  Counter counter;
  counter.Add(1);
  Table table;
  table.Write(counter.WaitForAtLeast(1) + counter.AddOutsideTheLock(1) + counter.Sum() +
              ordered.Put());
  return table.Read();
}

}  // namespace kvtier
