// EngineSequencer: puts one engine publisher's messages in order, asking its
// replay endpoint for what was missed.
//
// Each message carries the publisher's sequence number (8 bytes, big-endian,
// from 0):
//   - the next number in order is delivered;
//   - a gap (seq > next) buffers live messages and asks for a replay from
//   `next`; replayed
//     messages fill the gap, then the buffer is delivered. A first message with
//     seq > 0 replays from 0 (the subscription started late);
//   - a replay that starts above `next` (the publisher's buffer no longer
//   reaches back), no
//     replay endpoint, a replay that does not end within replay_timeout, or
//     more buffered messages than max_buffered: what was missed is lost, so the
//     engine's blocks are cleared and delivery goes on from the first message
//     still held;
//   - seq < next on the live stream: the publisher restarted (its numbers start
//   at 0
//     again), so its blocks are cleared and its stream starts over.
//
// Thread safety: none; the subscriber's thread owns it.
// Ownership: the sink outlives the sequencer.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"

namespace kvtier::coordinator {

enum class EngineClearReason {
  kRestart,
  kReplayTooShort,
  kNoReplay,
  kReplayTimeout,
  kBufferFull,
  kCount
};
std::string_view EngineClearReasonName(EngineClearReason reason);

class EngineSequencerSink {
 public:
  virtual ~EngineSequencerSink() = default;
  virtual void Deliver(uint64_t seq, std::string_view payload) = 0;
  // Everything delivered so far is void: the engine's blocks leave the index.
  virtual void Clear(EngineClearReason reason) = 0;
  // Asks the replay endpoint for every message from `from` on.
  virtual void RequestReplay(uint64_t from) = 0;
};

struct EngineSequencerOptions {
  bool can_replay = true;  // the engine has a replay endpoint
  size_t max_buffered = 100000;
  Nanos replay_timeout = std::chrono::seconds(2);
};

class EngineSequencer {
 public:
  EngineSequencer(EngineSequencerOptions options, EngineSequencerSink& sink)
      : options_(options), sink_(sink) {}

  void OnLive(uint64_t seq, std::string payload, Nanos now);
  // A replayed message; OnReplayEnd when the publisher's end marker arrives.
  void OnReplay(uint64_t seq, std::string_view payload);
  void OnReplayEnd();
  // Gives up a replay that has not ended within replay_timeout.
  void OnTick(Nanos now);

  bool replaying() const { return replay_started_.has_value(); }
  // The next sequence number expected; nullopt before the first message.
  std::optional<uint64_t> next() const { return next_; }
  uint64_t gaps() const { return gaps_; }
  uint64_t replays() const { return replays_; }
  size_t buffered() const { return buffered_.size(); }

 private:
  struct Held {
    uint64_t seq;
    std::string payload = {};
  };
  void Deliver(uint64_t seq, std::string_view payload) {
    sink_.Deliver(seq, payload);
    next_ = seq + 1;
  }
  void StartReplay(uint64_t from, Nanos now);
  // Delivers what the buffer holds in order, up to the next gap (which starts a
  // replay).
  void Drain();
  // What was missed is lost: clear, then go on from the first message held.
  void GiveUp(EngineClearReason reason);

  EngineSequencerOptions options_ = {};
  EngineSequencerSink& sink_;
  std::optional<uint64_t> next_ = {};
  std::optional<Nanos> replay_started_ = {};
  std::deque<Held> buffered_;  // live messages held during a replay, in arrival order
  uint64_t gaps_ = 0;
  uint64_t replays_ = 0;
};

}  // namespace kvtier::coordinator
