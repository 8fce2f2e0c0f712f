// expect: calling function 'AddLocked' requires holding mutex 'mu_' exclusively
#include "common/mutex.h"

namespace kvtier {
class Counter {
 public:
  void Add() { AddLocked(); }  // the caller does not hold mu_

 private:
  void AddLocked() KVTIER_REQUIRES(mu_) { ++count_; }
  Mutex mu_;
  int count_ KVTIER_GUARDED_BY(mu_) = 0;
};
void Use() { Counter().Add(); }
}  // namespace kvtier
