#include "services/coordinator/engines/engine_sequencer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvtier::coordinator {
namespace {

// Records what the sequencer asks for, as one line each: "d3" delivered 3, "r5"
// replay from 5, "c:restart" cleared.
class Recorder final : public EngineSequencerSink {
 public:
  void Deliver(uint64_t seq, std::string_view payload) override {
    log.push_back("d" + std::to_string(seq));
    EXPECT_EQ(payload, "p" + std::to_string(seq));
  }
  void Clear(EngineClearReason reason) override {
    log.push_back("c:" + std::string(EngineClearReasonName(reason)));
  }
  void RequestReplay(uint64_t from) override { log.push_back("r" + std::to_string(from)); }
  std::vector<std::string> log;
};

std::string P(uint64_t seq) { return "p" + std::to_string(seq); }

using Log = std::vector<std::string>;
constexpr Nanos kT0{0};

TEST(EngineSequencerTest, InOrderMessagesAreDelivered) {
  Recorder r;
  EngineSequencer s({}, r);
  for (uint64_t i = 0; i < 3; ++i) s.OnLive(i, P(i), kT0);
  EXPECT_EQ(r.log, (Log{"d0", "d1", "d2"}));
  EXPECT_EQ(s.next(), 3u);
}

TEST(EngineSequencerTest, AGapIsFilledByTheReplayThenTheBufferDrains) {
  Recorder r;
  EngineSequencer s({}, r);
  s.OnLive(0, P(0), kT0);
  s.OnLive(3, P(3), kT0);
  s.OnLive(4, P(4), kT0);
  EXPECT_EQ(r.log, (Log{"d0", "r1"}));
  EXPECT_TRUE(s.replaying());
  for (uint64_t i = 0; i < 4; ++i) s.OnReplay(i, P(i));  // the publisher's buffer from 0 on
  s.OnReplayEnd();
  EXPECT_EQ(r.log, (Log{"d0", "r1", "d1", "d2", "d3", "d4"}));
  EXPECT_FALSE(s.replaying());
  EXPECT_EQ(s.gaps(), 1u);
}

TEST(EngineSequencerTest, ALateSubscriberReplaysFromZero) {
  Recorder r;
  EngineSequencer s({}, r);
  s.OnLive(7, P(7), kT0);
  EXPECT_EQ(r.log, (Log{"r0"}));
  for (uint64_t i = 0; i < 7; ++i) s.OnReplay(i, P(i));
  s.OnReplayEnd();
  EXPECT_EQ(r.log.back(), "d7");
  EXPECT_EQ(r.log.size(), 9u);
}

TEST(EngineSequencerTest, AReplayThatCannotReachBackClears) {
  Recorder r;
  EngineSequencer s({}, r);
  s.OnLive(0, P(0), kT0);
  s.OnLive(9, P(9), kT0);
  s.OnReplay(5, P(5));  // the publisher kept only 5 on
  s.OnReplay(6, P(6));
  s.OnReplayEnd();
  EXPECT_EQ(r.log, (Log{"d0", "r1", "c:replay_too_short", "d5", "d6", "c:replay_too_short", "d9"}));
}

TEST(EngineSequencerTest, ARestartedPublisherClearsAndStartsOver) {
  Recorder r;
  EngineSequencer s({}, r);
  for (uint64_t i = 0; i < 5; ++i) s.OnLive(i, P(i), kT0);
  s.OnLive(0, P(0), kT0);
  EXPECT_EQ(r.log, (Log{"d0", "d1", "d2", "d3", "d4", "c:restart", "d0"}));
}

TEST(EngineSequencerTest, WithoutReplayAGapClearsAndGoesOn) {
  Recorder r;
  EngineSequencer s({.can_replay = false}, r);
  s.OnLive(0, P(0), kT0);
  s.OnLive(2, P(2), kT0);
  EXPECT_EQ(r.log, (Log{"d0", "c:no_replay", "d2"}));
}

TEST(EngineSequencerTest, AReplayThatNeverEndsTimesOut) {
  Recorder r;
  EngineSequencer s({.replay_timeout = std::chrono::seconds(2)}, r);
  s.OnLive(0, P(0), kT0);
  s.OnLive(2, P(2), kT0);
  s.OnTick(std::chrono::seconds(1));
  EXPECT_TRUE(s.replaying());
  s.OnTick(std::chrono::seconds(2));
  EXPECT_EQ(r.log, (Log{"d0", "r1", "c:replay_timeout", "d2"}));
  s.OnReplay(1, P(1));  // too late: ignored
  EXPECT_EQ(r.log.size(), 4u);
}

TEST(EngineSequencerTest, ABufferOverflowGivesUpTheReplay) {
  Recorder r;
  EngineSequencer s({.max_buffered = 2}, r);
  s.OnLive(0, P(0), kT0);
  s.OnLive(5, P(5), kT0);
  s.OnLive(6, P(6), kT0);
  s.OnLive(7, P(7), kT0);
  EXPECT_EQ(r.log, (Log{"d0", "r1", "c:buffer_full", "d5", "d6", "d7"}));
  EXPECT_FALSE(s.replaying());
}

TEST(EngineSequencerTest, DuplicatesInTheReplayAreSkipped) {
  Recorder r;
  EngineSequencer s({}, r);
  s.OnLive(0, P(0), kT0);
  s.OnLive(1, P(1), kT0);
  s.OnLive(3, P(3), kT0);
  s.OnReplay(0, P(0));
  s.OnReplay(1, P(1));
  s.OnReplay(2, P(2));
  s.OnReplay(3, P(3));
  s.OnReplayEnd();
  EXPECT_EQ(r.log, (Log{"d0", "d1", "r2", "d2", "d3"}));
}

}  // namespace
}  // namespace kvtier::coordinator
