#include "common/clock.h"

#include <cassert>

namespace kvtier {

Nanos SystemClock::Now() const {
  return std::chrono::duration_cast<Nanos>(std::chrono::steady_clock::now().time_since_epoch());
}

SystemClock& SystemClock::Instance() {
  static SystemClock clock;
  return clock;
}

void FakeClock::Advance(Nanos delta) {
  assert(delta.count() >= 0 && "FakeClock never goes back in time");
  now_.fetch_add(delta.count(), std::memory_order_acq_rel);
}

void FakeClock::Set(Nanos now) {
  assert(now >= Now() && "FakeClock never goes back in time");
  now_.store(now.count(), std::memory_order_release);
}

}  // namespace kvtier
