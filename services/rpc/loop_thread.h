// LoopThread: a thread of its own running a KJ event loop, for a library that must not
// share a busy loop. `kvtier up` runs its worker on one, so that a worker call that
// copies hundreds of megabytes (an allocation's victims handed to the host tier) does
// not hold up the coordinator's lookups on the RPC loop.
//
// Other threads hand it work through executor() (kj::Executor): executeAsync runs a
// function there and gives the caller a promise for its result on the caller's own loop;
// calls from one thread run in the order they were made (a function that returns a
// promise lets the next call run while it waits). executeSync blocks the caller until
// the function is done: for rare calls from a thread that may wait that long.
// `tick`, when set, runs on the thread every tick_interval.
//
// Thread safety: executor() from any thread. The destructor (from any other thread) lets
// the work already queued run, then stops the loop and joins the thread: promises the
// loop was still waiting on are dropped, and their callers' promises break.
// Ownership: owns the thread; whoever holds executor() must stop using it before the
// LoopThread goes.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <kj/async.h>

#include "common/status.h"

namespace kvtier::rpc {

struct LoopThreadOptions {
  std::string name = "kvt-loop";  // the thread's (common/thread_name.h)
  std::function<void()> tick = nullptr;
  std::chrono::milliseconds tick_interval{1000};
};

class LoopThread {
 public:
  // The loop runs before Create returns. kInvalidArgument: a tick without a positive interval.
  [[nodiscard]] static Result<std::unique_ptr<LoopThread>> Create(LoopThreadOptions options);
  ~LoopThread();
  LoopThread(const LoopThread&) = delete;
  LoopThread& operator=(const LoopThread&) = delete;

  const kj::Executor& executor() const;

  class Impl;

 private:
  explicit LoopThread(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::rpc
