// expect: reading variable 'count_' requires holding mutex 'mu_'
#include "common/mutex.h"

namespace kvtier {
class Counter {
 public:
  int Get() { return count_; }  // no lock

 private:
  Mutex mu_;
  int count_ KVTIER_GUARDED_BY(mu_) = 0;
};
int Use() { return Counter().Get(); }
}  // namespace kvtier
