#include "services/coordinator/engines/engine_sequencer.h"

namespace kvtier::coordinator {

std::string_view EngineClearReasonName(EngineClearReason reason) {
  switch (reason) {
    case EngineClearReason::kRestart: return "restart";
    case EngineClearReason::kReplayTooShort: return "replay_too_short";
    case EngineClearReason::kNoReplay: return "no_replay";
    case EngineClearReason::kReplayTimeout: return "replay_timeout";
    case EngineClearReason::kBufferFull: return "buffer_full";
    case EngineClearReason::kCount: break;
  }
  return "?";
}

void EngineSequencer::OnLive(uint64_t seq, std::string payload, Nanos now) {
  if (replaying()) {
    buffered_.push_back({seq, std::move(payload)});
    if (buffered_.size() > options_.max_buffered) GiveUp(EngineClearReason::kBufferFull);
    return;
  }
  if (next_.has_value() && seq < *next_) {
    sink_.Clear(EngineClearReason::kRestart);
    next_.reset();
  }
  const uint64_t expected = next_.value_or(0);
  if (seq == expected) {
    Deliver(seq, payload);
    return;
  }
  ++gaps_;
  if (!options_.can_replay) {
    // Nothing delivered yet: nothing to void, the stream simply starts here.
    if (next_.has_value()) sink_.Clear(EngineClearReason::kNoReplay);
    Deliver(seq, payload);
    return;
  }
  buffered_.push_back({seq, std::move(payload)});
  StartReplay(expected, now);
}

void EngineSequencer::OnReplay(uint64_t seq, std::string_view payload) {
  if (!replaying()) return;  // a late answer to a replay given up
  const uint64_t expected = next_.value_or(0);
  if (seq < expected) return;
  if (seq > expected) sink_.Clear(EngineClearReason::kReplayTooShort);
  Deliver(seq, payload);
}

void EngineSequencer::OnReplayEnd() {
  if (!replaying()) return;
  replay_started_.reset();
  Drain();
}

void EngineSequencer::OnTick(Nanos now) {
  if (replaying() && now - *replay_started_ >= options_.replay_timeout)
    GiveUp(EngineClearReason::kReplayTimeout);
}

void EngineSequencer::StartReplay(uint64_t from, Nanos now) {
  replay_started_ = now;
  ++replays_;
  sink_.RequestReplay(from);
}

void EngineSequencer::Drain() {
  while (!buffered_.empty()) {
    Held& front = buffered_.front();
    const uint64_t expected = next_.value_or(0);
    if (front.seq > expected) {
      // The replay ended and the gap is still there: those messages are gone.
      GiveUp(EngineClearReason::kReplayTooShort);
      return;
    }
    if (front.seq == expected) Deliver(front.seq, front.payload);
    buffered_.pop_front();
  }
}

void EngineSequencer::GiveUp(EngineClearReason reason) {
  replay_started_.reset();
  sink_.Clear(reason);
  while (!buffered_.empty()) {
    Held& front = buffered_.front();
    if (!next_.has_value() || front.seq >= *next_) Deliver(front.seq, front.payload);
    buffered_.pop_front();
  }
}

}  // namespace kvtier::coordinator
