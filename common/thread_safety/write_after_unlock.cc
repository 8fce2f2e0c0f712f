// expect: writing variable 'count_' requires holding mutex 'mu_' exclusively
#include "common/mutex.h"

namespace kvtier {
class Counter {
 public:
  void Add() {
    MutexLock lock(mu_);
    lock.Unlock();
    ++count_;  // after the lock was let go
    lock.Lock();
  }

 private:
  Mutex mu_;
  int count_ KVTIER_GUARDED_BY(mu_) = 0;
};
void Use() { Counter().Add(); }
}  // namespace kvtier
