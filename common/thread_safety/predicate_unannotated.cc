// expect: reading variable 'ready_' requires holding mutex 'mu_'
#include "common/mutex.h"

namespace kvtier {
class Gate {
 public:
  void Pass() {
    MutexLock lock(mu_);
    opened_.Wait(lock, [&] { return ready_; });  // the predicate does not say it holds mu_
  }

 private:
  Mutex mu_;
  CondVar opened_;
  bool ready_ KVTIER_GUARDED_BY(mu_) = false;
};
void Use() { Gate().Pass(); }
}  // namespace kvtier
