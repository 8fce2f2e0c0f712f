// expect: mutex 'write_mu_' must be acquired before 'index_mu_'
#include "common/mutex.h"

namespace kvtier {
class Store {
 public:
  void Put() {
    MutexLock index(index_mu_);
    MutexLock write(write_mu_);  // the reverse of the declared order: a deadlock waiting
    ++writes_;
  }

 private:
  Mutex write_mu_;
  Mutex index_mu_ KVTIER_ACQUIRED_AFTER(write_mu_);
  int writes_ KVTIER_GUARDED_BY(write_mu_) = 0;
};
void Use() { Store().Put(); }
}  // namespace kvtier
