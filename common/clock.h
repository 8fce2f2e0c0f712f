// Clock: the injected source of time for every kvtier library.
//
// Libraries never read std::chrono clocks directly: they take a Clock&, so that tests
// drive time with a FakeClock and run in microseconds. Time is monotonic nanoseconds
// since an arbitrary epoch (the process start for SystemClock, zero for FakeClock);
// only differences are meaningful, never wall-clock dates.
//
// Thread safety: both implementations are safe to call from any thread.
// Ownership: callers keep the Clock alive longer than every object that holds it.
//
// REQUIRES: FakeClock::Advance takes a non-negative duration (time never goes back).
#pragma once

#include <atomic>
#include <chrono>

namespace kvtier {

using Nanos = std::chrono::nanoseconds;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Nanos Now() const = 0;
};

// Reads std::chrono::steady_clock.
class SystemClock final : public Clock {
 public:
  Nanos Now() const override;
  // A process-wide instance for binaries; libraries still take a Clock&.
  static SystemClock& Instance();
};

// Starts at `start` and moves only when told to.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(Nanos start = Nanos(0)) : now_(start.count()) {}
  Nanos Now() const override { return Nanos(now_.load(std::memory_order_acquire)); }
  void Advance(Nanos delta);
  void Set(Nanos now);

 private:
  std::atomic<Nanos::rep> now_;
};

}  // namespace kvtier
