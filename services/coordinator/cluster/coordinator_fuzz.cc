// Fuzz target: the coordinator driven by three nodes' calls, as its RPC service makes them
// once their messages are decoded: registrations, heartbeats, leaves, sequenced event
// batches (stored, removed, tier changed, cleared; gaps, duplicates and stale
// incarnations), snapshots, lookups and routing, on a fake clock that the input moves.
// Keys come from a dozen, so that chains, parents and orphans meet. Each byte of the
// input is one choice; a finished input reads as zeros.
//
// Beyond no crash and no sanitizer report, every lookup must hold to what the nodes said:
// - a block matched under a salt scope was stored under that scope (by some event or
//   snapshot): the index never serves one tenant's block to another;
// - each location names a node, tier and pool that some event or snapshot put that block
//   in (the index never invents a place);
// - no location names a node that left, or whose lease ran out two lease periods ago;
// and a route never names such a node, nor a store.
#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/clock.h"
#include "services/coordinator/cluster/coordinator.h"
#include "tests/testing/fuzz_check.h"
#include "tests/testing/fuzz_choices.h"

namespace kvtier::coordinator {
namespace {

using kvtier::testing::FuzzCheck;
using Choices = kvtier::testing::FuzzChoices;

constexpr Nanos kLeaseTtl = std::chrono::seconds(1);
const std::array<std::string, 3> kNodes = {"w0", "w1", "s0"};  // two workers and a store

struct NodeModel {
  uint64_t incarnation = 0;
  uint64_t lease_id = 0;
  uint64_t next_sequence = 0;
  bool left = true;  // never registered, or left since
  Nanos renewed{0};  // the last registration or heartbeat that succeeded
};

// What the nodes told the coordinator, over-approximated: everything any call named,
// applied or not. A lookup may show less (evictions, orphans, a full index), never more.
struct Told {
  std::set<std::pair<ScopeId, BlockKey>> stored;                          // scope, key
  std::set<std::tuple<std::string, BlockKey, uint8_t, uint16_t>> placed;  // node, key, tier, pool
};

BlockKey KeyOf(uint32_t i) { return BlockKey{0xab, 1 + i}; }

class Harness {
 public:
  Harness() {
    CoordinatorOptions options;
    options.index.clock = &clock_;
    options.index.max_blocks = 24;  // full at times: refused stores and their children
    options.membership.clock = &clock_;
    options.membership.lease_ttl = kLeaseTtl;
    options.orphan_wait = std::chrono::milliseconds(300);
    options.max_refused_keys = 8;
    options.max_waiting_blocks = 6;
    coordinator_ = Coordinator::Create(options).value();
  }

  void Step(Choices& in) {
    const uint32_t node = in.Below(3);
    switch (in.Below(8)) {
      case 0: return Register(in, node);
      case 1: return Publish(in, node);
      case 2: return Snapshot(in, node);
      case 3: return Renew(node);
      case 4: return Leave(node);
      case 5: return Advance(in);
      case 6: return Lookup(in);
      default: return Route(in);
    }
  }

 private:
  void Register(Choices& in, uint32_t n) {
    Registration r{.node = kNodes[n],
                   .role = n < 2 ? NodeRole::kWorker : NodeRole::kStore,
                   .incarnation = 1 + in.Below(3)};
    r.pools.push_back({.tier = n < 2 ? Tier::kGpu : Tier::kHost, .pool = 0, .capacity_blocks = 8});
    if (n < 2 && in.Below(2) == 1) {
      r.pools.push_back({.tier = Tier::kGpu,
                         .pool = 1,
                         .capacity_blocks = 8,
                         .window = {2 + in.Below(3), in.Below(2)}});
    }
    const Result<RegisterResult> registered = coordinator_->Register(r);
    if (!registered.ok()) return;
    NodeModel& m = nodes_[n];
    m = {.incarnation = r.incarnation,
         .lease_id = registered->lease_id,
         .next_sequence = m.next_sequence,
         .left = false,
         .renewed = clock_.Now()};
    if (registered->snapshot_required) m.next_sequence = 0;
  }

  KvEvent Event(Choices& in, const std::string& node) {
    KvEvent e;
    e.kind = static_cast<KvEvent::Kind>(in.Below(4));
    e.scope = static_cast<ScopeId>(in.Below(2));
    e.tier = static_cast<Tier>(in.Below(3));
    e.pool = static_cast<uint16_t>(in.Below(2));
    e.to_tier = static_cast<Tier>(in.Below(3));
    e.to_pool = static_cast<uint16_t>(in.Below(2));
    const uint32_t keys = 1 + in.Below(3);
    for (uint32_t i = 0; i < keys; ++i) e.keys.push_back(KeyOf(in.Below(12)));
    if (in.Below(2) == 1) e.parent = KeyOf(in.Below(12));
    if (in.Below(2) == 1) {
      for (uint32_t i = 0; i < keys; ++i) {
        e.retention.push_back(
            {static_cast<uint8_t>(in.Below(101)), std::chrono::milliseconds(100 * in.Below(8))});
      }
    }
    if (in.Below(2) == 1) e.tokens.assign(size_t{keys} * (1 + in.Below(2)), in.Next());
    for (const BlockKey& key : e.keys) {
      if (e.kind == KvEvent::Kind::kStored) {
        told_.stored.insert({e.scope, key});
        told_.placed.insert({node, key, static_cast<uint8_t>(e.tier), e.pool});
      } else if (e.kind == KvEvent::Kind::kTierChanged) {
        told_.placed.insert({node, key, static_cast<uint8_t>(e.to_tier), e.to_pool});
      }
    }
    return e;
  }

  void Publish(Choices& in, uint32_t n) {
    NodeModel& m = nodes_[n];
    EventBatch batch{.node = kNodes[n],
                     .incarnation = m.incarnation + (in.Below(8) == 0 ? 1 : 0),
                     .first_sequence = m.next_sequence,
                     .events = {}};
    if (const uint32_t skew = in.Below(8); skew == 1 && batch.first_sequence > 0) {
      --batch.first_sequence;  // overlaps what was applied: a retry
    } else if (skew == 2) {
      ++batch.first_sequence;  // a gap
    }
    const uint32_t events = 1 + in.Below(3);
    for (uint32_t i = 0; i < events; ++i) batch.events.push_back(Event(in, kNodes[n]));
    const Result<EventAck> ack = coordinator_->PublishEvents(batch);
    if (ack.ok()) m.next_sequence = ack->next_sequence;
  }

  void Snapshot(Choices& in, uint32_t n) {
    NodeModel& m = nodes_[n];
    NodeSnapshot snapshot{.node = kNodes[n],
                          .incarnation = m.incarnation,
                          .next_sequence = m.next_sequence,
                          .blocks = {}};
    const uint32_t blocks = in.Below(6);
    for (uint32_t i = 0; i < blocks; ++i) {
      SnapshotBlock b{.key = KeyOf(in.Below(12)),
                      .parent = std::nullopt,
                      .scope = static_cast<ScopeId>(in.Below(2)),
                      .tier = static_cast<Tier>(in.Below(3)),
                      .pool = static_cast<uint16_t>(in.Below(2)),
                      .retention = {}};
      if (in.Below(2) == 1) b.parent = KeyOf(in.Below(12));
      told_.stored.insert({b.scope, b.key});
      told_.placed.insert({kNodes[n], b.key, static_cast<uint8_t>(b.tier), b.pool});
      snapshot.blocks.push_back(b);
    }
    (void)coordinator_->PublishSnapshot(snapshot);
  }

  void Renew(uint32_t n) {
    if (coordinator_->Heartbeat(kNodes[n], nodes_[n].lease_id, 3).ok())
      nodes_[n].renewed = clock_.Now();
  }

  void Leave(uint32_t n) {
    if (coordinator_->Leave(kNodes[n], nodes_[n].lease_id).ok()) nodes_[n].left = true;
  }

  void Advance(Choices& in) {
    clock_.Advance(kLeaseTtl / 4 * in.Below(6));
    coordinator_->Tick();
    for (NodeModel& m : nodes_) {
      if (clock_.Now() - m.renewed >= 2 * kLeaseTtl)
        m.left = true;  // expired for sure by this tick
    }
  }

  // Keys of a prompt, from the dozen.
  static std::vector<BlockKey> Prompt(Choices& in) {
    std::vector<BlockKey> keys;
    const uint32_t length = 1 + in.Below(6);
    for (uint32_t i = 0; i < length; ++i) keys.push_back(KeyOf(in.Below(12)));
    return keys;
  }

  bool Gone(const std::string& name) const {
    for (size_t n = 0; n < kNodes.size(); ++n) {
      if (kNodes[n] == name) return nodes_[n].left;
    }
    return true;  // a name no node has: never a live one
  }

  void Lookup(Choices& in) {
    const auto scope = static_cast<ScopeId>(in.Below(2));
    const std::vector<BlockKey> keys = Prompt(in);
    const LookupResult result = coordinator_->Lookup(scope, keys);
    FuzzCheck(result.matched_blocks <= keys.size(), "no more blocks matched than asked for");
    FuzzCheck(result.location_begin.size() == result.matched_blocks + 1u,
              "a location range per matched block");
    for (uint32_t i = 0; i < result.matched_blocks; ++i) {
      FuzzCheck(told_.stored.contains({scope, keys[i]}),
                "a matched block was stored under the lookup's scope");
      for (const Location& at : result.LocationsOf(i)) {
        const std::string& name = coordinator_->NodeName(at.node);
        FuzzCheck(told_.placed.contains({name, keys[i], static_cast<uint8_t>(at.tier), at.pool}),
                  "a location is one some event or snapshot placed the block in");
        FuzzCheck(!Gone(name), "no location names a node that left or expired");
      }
    }
  }

  void Route(Choices& in) {
    const auto scope = static_cast<ScopeId>(in.Below(2));
    const std::vector<BlockKey> keys = Prompt(in);
    const Result<RouteChoice> choice = coordinator_->Route(scope, {.keys = keys});
    if (!choice.ok()) {
      FuzzCheck(choice.status().code() == StatusCode::kUnavailable,
                "a route fails only for want of a worker");
      return;
    }
    const std::string& name = coordinator_->NodeName(choice->node);
    FuzzCheck(name != kNodes[2], "a route never names a store");
    FuzzCheck(!Gone(name), "a route never names a node that left or expired");
    FuzzCheck(choice->prefix_blocks <= keys.size(), "a route's prefix is within the prompt");
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> coordinator_;
  std::array<NodeModel, 3> nodes_{};
  Told told_;
};

}  // namespace
}  // namespace kvtier::coordinator

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvtier::coordinator::Choices in(data, size);
  kvtier::coordinator::Harness harness;  // a fresh coordinator per input: each replays alone
  while (!in.done()) harness.Step(in);
  return 0;
}
