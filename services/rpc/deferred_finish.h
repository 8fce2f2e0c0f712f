// DeferredFinish: keeps a connection's answered Cap'n Proto responses until its next call
// has been sent.
//
// Why: Cap'n Proto sends a call's Finish message when the client drops the call's
// response. Dropped at once, the Finish travels alone, about a round trip after the
// server's Return, and wakes the server's thread a second time for every call. Dropped
// right after the next call is sent, it follows that Call on the wire and the server
// reads both with one wake-up (BufferedMessageStream reads a burst at once): one sleep a
// call instead of two (docs/history/benchmarks-2026-11.md, "Finish messages behind the next call",
// under #kvtier-bench-lookup-rpc-lookup-over-the-rpc-on-loopback). The cost: the server keeps each
// held answer until that next call, so a connection that goes quiet leaves its last answers held
// there.
//
// Usage, on the connection's event-loop thread:
//   auto promise = request.send().then([&](auto response) { use(response);
//   deferred.Keep(kj::mv(response)); }); deferred.CallSent();  // after every send on the
//   connection: the held Finishes follow it
//
// Thread safety: none; one per connection, used and destroyed on its event-loop thread
// (a response must die there).
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace kvtier::rpc {

class DeferredFinish {
 public:
  // More than this many held at once (a burst of answers with no call sent after them)
  // are dropped at once instead: the server's memory for them is freed sooner.
  static constexpr size_t kMaxHeld = 64;

  // Holds `answer` (a capnp::Response<T>, or anything whose destruction is the signal).
  template <typename T>
  void Keep(T&& answer) {
    if (held_.size() >= kMaxHeld) held_.clear();
    held_.push_back(std::make_shared<std::decay_t<T>>(std::forward<T>(answer)));
  }

  // A call was just sent on the connection: drops what is held, so that their Finish
  // messages go out right behind it.
  void CallSent() { held_.clear(); }

  size_t held() const { return held_.size(); }

 private:
  std::vector<std::shared_ptr<void>> held_;
};

}  // namespace kvtier::rpc
