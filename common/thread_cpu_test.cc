#include "common/thread_cpu.h"

#include <time.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "common/thread_name.h"

namespace kvtier {
namespace {

double OwnCpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

// A thread named "cpu-test-spin" burns 200 ms of CPU between two samples while one named
// "cpu-test-idle" sleeps: the spinner's prefix gets its time, the sleeper's next to none.
TEST(ThreadCpuTest, ChargesEachThreadsCpuToItsName) {
  std::atomic<int> stage{0};  // 1: both named; 2: first sample taken; 3: spun; 4: second taken
  auto wait_for = [&](int s) {
    for (int seen = stage.load(); seen < s; seen = stage.load()) stage.wait(seen);
  };
  auto advance = [&] {
    ++stage;
    stage.notify_all();
  };
  std::thread spinner([&] {
    NameThisThread("cpu-test-spin");
    advance();
    wait_for(2);
    const double start = OwnCpuSeconds();
    while (OwnCpuSeconds() - start < 0.2) {
    }
    advance();
    wait_for(4);
  });
  std::thread sleeper([&] {
    NameThisThread("cpu-test-idle");
    wait_for(4);
  });
  wait_for(1);
  Result<std::vector<ThreadCpu>> before = ReadThreadCpu();
  advance();
  wait_for(3);
  Result<std::vector<ThreadCpu>> after = ReadThreadCpu();
  advance();
  spinner.join();
  sleeper.join();
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_TRUE(after.ok()) << after.status().ToString();

  const double spun = CpuSecondsBetween(*before, *after, "cpu-test-spin");
  EXPECT_GE(spun, 0.18);  // clock ticks of 10 ms where the kernel keeps no scheduler statistics
  EXPECT_LT(spun, 0.5);
  EXPECT_LT(CpuSecondsBetween(*before, *after, "cpu-test-idle"), 0.02);
  // A prefix counts every thread it names: both test threads together.
  EXPECT_GE(CpuSecondsBetween(*before, *after, "cpu-test-"), spun);
  EXPECT_EQ(CpuSecondsBetween(*before, *after, "no-such-thread"), 0);
}

// A thread that starts after the first sample is charged all its time.
TEST(ThreadCpuTest, AThreadBornBetweenSamplesCountsWhole) {
  Result<std::vector<ThreadCpu>> before = ReadThreadCpu();
  ASSERT_TRUE(before.ok());
  std::atomic<bool> spun{false}, sampled{false};
  std::thread late([&] {
    NameThisThread("cpu-test-late");
    const double start = OwnCpuSeconds();
    while (OwnCpuSeconds() - start < 0.05) {
    }
    spun = true;
    spun.notify_all();
    sampled.wait(false);
  });
  spun.wait(false);
  Result<std::vector<ThreadCpu>> after = ReadThreadCpu();
  sampled = true;
  sampled.notify_all();
  late.join();
  ASSERT_TRUE(after.ok());
  EXPECT_GE(CpuSecondsBetween(*before, *after, "cpu-test-late"), 0.04);
}

}  // namespace
}  // namespace kvtier
