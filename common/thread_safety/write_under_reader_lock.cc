// expect: writing variable 'value_' requires holding shared mutex 'mu_' exclusively
#include "common/mutex.h"

namespace kvtier {
class Table {
 public:
  void Write(int value) {
    ReaderLock lock(mu_);  // shared: not enough to write
    value_ = value;
  }

 private:
  SharedMutex mu_;
  int value_ KVTIER_GUARDED_BY(mu_) = 0;
};
void Use() { Table().Write(1); }
}  // namespace kvtier
