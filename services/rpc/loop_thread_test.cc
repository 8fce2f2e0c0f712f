#include "services/rpc/loop_thread.h"

#include <pthread.h>

#include <array>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <kj/debug.h>

namespace kvtier::rpc {
namespace {

using namespace std::chrono_literals;

std::string ThisThreadsName() {
  std::array<char, 32> name{};
  pthread_getname_np(pthread_self(), name.data(), name.size());
  return name.data();
}

TEST(LoopThreadTest, WorkRunsOnTheNamedThreadAndItsResultComesBackHere) {
  kj::AsyncIoContext io_ =
      kj::setupAsyncIo();  // the caller's own loop, as an RPC server's thread has one
  auto loop = LoopThread::Create({.name = "kvt-worker"}).value();
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  const std::string name = loop->executor()
                               .executeAsync([&] {
                                 ran_on = std::this_thread::get_id();
                                 return ThisThreadsName();
                               })
                               .wait(io_.waitScope);
  EXPECT_EQ(name, "kvt-worker");
  EXPECT_NE(ran_on, caller);
}

// Three calls made in a row run in that order, each after the one before has finished,
// although the first is the slowest.
TEST(LoopThreadTest, CallsFromOneThreadRunInTheOrderMade) {
  kj::AsyncIoContext io_ =
      kj::setupAsyncIo();  // the caller's own loop, as an RPC server's thread has one
  auto loop = LoopThread::Create({}).value();
  std::vector<int> order;  // touched only on the loop's thread until the last call is back
  auto first = loop->executor().executeAsync([&] {
    std::this_thread::sleep_for(20ms);
    order.push_back(1);
  });
  auto second = loop->executor().executeAsync([&] { order.push_back(2); });
  auto third = loop->executor().executeAsync([&] { order.push_back(3); });
  third.wait(io_.waitScope);
  first.wait(io_.waitScope);
  second.wait(io_.waitScope);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

// While the loop thread runs a long call, this thread's loop goes on with its own events:
// the point of moving work off it.
TEST(LoopThreadTest, TheCallersLoopGoesOnWhileTheWorkRuns) {
  kj::AsyncIoContext io_ =
      kj::setupAsyncIo();  // the caller's own loop, as an RPC server's thread has one
  auto loop = LoopThread::Create({}).value();
  std::atomic<bool> release{false};
  auto slow = loop->executor().executeAsync([&] {
    while (!release) std::this_thread::sleep_for(1ms);
    return 7;
  });
  bool timer_fired = false;
  io_.provider->getTimer()
      .afterDelay(5 * kj::MILLISECONDS)
      .then([&] { timer_fired = true; })
      .wait(io_.waitScope);
  EXPECT_TRUE(timer_fired);
  release = true;
  EXPECT_EQ(slow.wait(io_.waitScope), 7);
}

// A function that returns a promise is awaited on the loop thread; an exception thrown
// there reaches the caller.
TEST(LoopThreadTest, PromisesAreAwaitedThereAndExceptionsComeBack) {
  kj::AsyncIoContext io_ =
      kj::setupAsyncIo();  // the caller's own loop, as an RPC server's thread has one
  auto loop = LoopThread::Create({}).value();
  const int later = loop->executor()
                        .executeAsync([] {
                          return kj::evalLater([] { return 41; }).then([](int v) { return v + 1; });
                        })
                        .wait(io_.waitScope);
  EXPECT_EQ(later, 42);
  auto failed = loop->executor().executeAsync([]() -> int { KJ_FAIL_REQUIRE("the pool is gone"); });
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] { failed.wait(io_.waitScope); })) {
    EXPECT_NE(std::string(e->getDescription().cStr()).find("the pool is gone"), std::string::npos);
  } else {
    ADD_FAILURE() << "the exception did not come back";
  }
}

TEST(LoopThreadTest, TicksRunOnTheLoopThread) {
  kj::AsyncIoContext io_ =
      kj::setupAsyncIo();  // the caller's own loop, as an RPC server's thread has one
  std::atomic<int> ticks{0};
  std::atomic<bool> elsewhere{false};
  const std::thread::id caller = std::this_thread::get_id();
  {
    auto loop = LoopThread::Create({.name = "kvt-ticker",
                                    .tick =
                                        [&] {
                                          if (std::this_thread::get_id() == caller)
                                            elsewhere = true;
                                          ++ticks;
                                        },
                                    .tick_interval = 1ms})
                    .value();
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (ticks < 3 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
  }
  const int after_stop = ticks;
  std::this_thread::sleep_for(10ms);
  EXPECT_GE(after_stop, 3);
  EXPECT_EQ(ticks, after_stop) << "ticks went on after the loop was destroyed";
  EXPECT_FALSE(elsewhere);
}

TEST(LoopThreadTest, ATickWithoutAnIntervalIsRefused) {
  Result<std::unique_ptr<LoopThread>> loop =
      LoopThread::Create({.tick = [] {}, .tick_interval = 0ms});
  ASSERT_FALSE(loop.ok());
  EXPECT_EQ(loop.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(loop.status().message().find("tick_interval"), std::string::npos)
      << loop.status().message();
}

// Work already queued when the loop goes still runs; a promise the loop was waiting on is
// dropped with it, and its caller's promise breaks instead of hanging.
TEST(LoopThreadTest, QueuedWorkRunsAndPromisesPendingThereBreakWhenTheLoopGoes) {
  kj::AsyncIoContext io_ = kj::setupAsyncIo();
  auto loop = LoopThread::Create({}).value();
  std::atomic<bool> started{false};
  auto running = loop->executor().executeAsync([&] {
    started = true;
    std::this_thread::sleep_for(20ms);
  });
  std::atomic<bool> queued_ran{false};
  auto queued = loop->executor().executeAsync([&] { queued_ran = true; });
  auto never = loop->executor().executeAsync([] { return kj::Promise<int>(kj::NEVER_DONE); });
  while (!started) std::this_thread::sleep_for(1ms);
  loop.reset();
  EXPECT_TRUE(queued_ran);
  EXPECT_TRUE(kj::runCatchingExceptions([&] { never.wait(io_.waitScope); }) != nullptr);
  running.wait(io_.waitScope);
  queued.wait(io_.waitScope);
}

}  // namespace
}  // namespace kvtier::rpc
