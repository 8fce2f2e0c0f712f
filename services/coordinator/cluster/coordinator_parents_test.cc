// Stored events whose parent the index does not hold: a parent later in the same batch
// (parent_lookahead.h), one that another batch or node brings while the child waits
// (waiting_children.h), one held nowhere (an orphan), and one left out of a full index.
#include <gtest/gtest.h>

#include "services/coordinator/cluster/testing/coordinator_fixture.h"

namespace kvtier::coordinator {
namespace {

// No lookup could reach a block whose parent no node holds, and a snapshot would leave it
// out too: once no event has brought the parent within the orphan wait, it is left out
// and counted, and the stream goes on without a resync.
TEST_F(CoordinatorTest, AStoredBlockWhoseParentNoNodeHoldsIsLeftOutWithoutASnapshot) {
  Join("w1");
  const auto ab = Chain(1, 2);
  const uint64_t resyncs = coordinator_->Stats().membership.resyncs;
  const EventAck ack = Publish("w1", 0, {Stored({ab[1]}, ab[0])});  // a never stored
  EXPECT_EQ(ack.verdict, BatchVerdict::kApply);
  EXPECT_EQ(ack.next_sequence, 1u);
  EXPECT_EQ(coordinator_->Stats().waiting_blocks, 1u) << "b waits for a";
  EXPECT_EQ(coordinator_->Stats().orphaned_blocks, 0u);
  EXPECT_EQ(OrphansOnceTheWaitIsOver(), 1u);
  EXPECT_EQ(Matched(ab), 0u);
  EXPECT_EQ(coordinator_->Stats().membership.resyncs, resyncs);
  // Once a is stored, storing b again links it.
  EXPECT_EQ(Publish("w1", 1, {Stored({ab[0]}), Stored({ab[1]}, ab[0])}).verdict,
            BatchVerdict::kApply);
  EXPECT_EQ(Matched(ab), 2u);
}

// A worker evicts a and b (leaf first) and hands them to a store: its removals reach the
// coordinator first and take both out of the index; the store's events come child first.
// b waits for a, later in the same batch, and both are indexed at the store: no snapshot.
TEST_F(CoordinatorTest, AChainSentChildFirstIsAppliedParentFirst) {
  const auto abc = Chain(1, 3);
  WorkerEvictsChain(abc);
  const uint64_t resyncs = coordinator_->Stats().membership.resyncs;
  const EventAck ack =
      Publish("s1", 0,
              {Stored({abc[2]}, abc[1], Tier::kHost), Stored({abc[1]}, abc[0], Tier::kHost),
               Stored({abc[0]}, std::nullopt, Tier::kHost)});
  EXPECT_EQ(ack.verdict, BatchVerdict::kApply);
  EXPECT_EQ(ack.next_sequence, 3u);
  EXPECT_EQ(Matched(abc), 3u) << "c waited for b, which waited for a";
  EXPECT_EQ(coordinator_->Stats().membership.resyncs, resyncs);
  EXPECT_EQ(coordinator_->Stats().orphaned_blocks, 0u);
}

// The same race where the parent is gone for good: the store's copy of b arrives after
// the last holder of a let go, and nothing in its batch stores a. b is left out (no
// lookup could reach it) and the store's stream goes on without a snapshot.
TEST_F(CoordinatorTest, AStoresCopyOfABlockWhoseParentLeftFirstIsLeftOutNotResynced) {
  const auto ab = Chain(1, 2), c = Chain(3, 1);
  WorkerEvictsChain(ab);
  const uint64_t resyncs = coordinator_->Stats().membership.resyncs;
  const EventAck ack =
      Publish("s1", 0, {Stored({ab[1]}, ab[0], Tier::kHost), Stored(c, std::nullopt, Tier::kHost)});
  EXPECT_EQ(ack.verdict, BatchVerdict::kApply);
  EXPECT_EQ(ack.next_sequence, 2u);
  EXPECT_EQ(Matched(ab), 0u);
  EXPECT_EQ(Matched(c), 1u) << "the store's stream went on";
  EXPECT_EQ(coordinator_->Stats().membership.resyncs, resyncs);
  EXPECT_EQ(OrphansOnceTheWaitIsOver(), 1u);
}

// The race across batches, as `kvtier up` showed it: the worker evicted c, then (at its
// next allocation) b and a; the store's first batch brings c alone, when no node holds
// b any more. c waits, and the store's next batch, which brings a and b, takes it in.
TEST_F(CoordinatorTest, AChildWhoseParentComesInTheStoresNextBatchIsIndexed) {
  const auto abc = Chain(1, 3);
  WorkerEvictsChain(abc);
  ASSERT_EQ(Publish("s1", 0, {Stored({abc[2]}, abc[1], Tier::kHost)}).verdict,
            BatchVerdict::kApply);
  EXPECT_EQ(coordinator_->Stats().waiting_blocks, 1u);
  EXPECT_EQ(Matched(abc), 0u);
  ASSERT_EQ(
      Publish("s1", 1,
              {Stored({abc[1]}, abc[0], Tier::kHost), Stored({abc[0]}, std::nullopt, Tier::kHost)})
          .verdict,
      BatchVerdict::kApply);
  EXPECT_EQ(Matched(abc), 3u) << "b waited for a in its batch, c for b across batches";
  const CoordinatorStats stats = coordinator_->Stats();
  EXPECT_EQ(stats.adopted_blocks, 1u);
  EXPECT_EQ(stats.waiting_blocks, 0u);
  EXPECT_EQ(OrphansOnceTheWaitIsOver(), 0u);
  const LookupResult found = coordinator_->Lookup(0, abc);
  ASSERT_EQ(found.LocationsOf(2).size(), 1u);
  EXPECT_EQ(found.LocationsOf(2)[0].tier, Tier::kHost) << "c is indexed where the store said";
}

// The parent may come from any node: the store's c waits, and the worker storing b
// (onboarded again, say) takes c in under b, at the store.
TEST_F(CoordinatorTest, AWaitingChildIsIndexedWhenAnotherNodeStoresItsParent) {
  const auto abc = Chain(1, 3);
  WorkerEvictsChain(abc);
  ASSERT_EQ(Publish("s1", 0, {Stored({abc[2]}, abc[1], Tier::kHost)}).verdict,
            BatchVerdict::kApply);
  ASSERT_EQ(Publish("w1", 1 + abc.size(), {Stored({abc[0], abc[1]})}).verdict,
            BatchVerdict::kApply);
  EXPECT_EQ(Matched(abc), 3u);
  EXPECT_EQ(coordinator_->Stats().adopted_blocks, 1u);
}

// Waiting children wait in turn: c for b, then b (a later batch) for a. When a comes,
// b is taken in, and with it c.
TEST_F(CoordinatorTest, AWaitingChainIsTakenInWholeWhenItsRootComes) {
  const auto abc = Chain(1, 3);
  WorkerEvictsChain(abc);
  ASSERT_EQ(Publish("s1", 0, {Stored({abc[2]}, abc[1], Tier::kHost)}).verdict,
            BatchVerdict::kApply);
  ASSERT_EQ(Publish("s1", 1, {Stored({abc[1]}, abc[0], Tier::kHost)}).verdict,
            BatchVerdict::kApply);
  EXPECT_EQ(coordinator_->Stats().waiting_blocks, 2u);
  ASSERT_EQ(Publish("s1", 2, {Stored({abc[0]}, std::nullopt, Tier::kHost)}).verdict,
            BatchVerdict::kApply);
  EXPECT_EQ(Matched(abc), 3u);
  EXPECT_EQ(coordinator_->Stats().adopted_blocks, 2u);
  EXPECT_EQ(coordinator_->Stats().waiting_blocks, 0u);
}

// While c waits, the store says more of it: it removes c. The waiting event is out of
// date and is dropped (an orphan); the parent's later arrival does not bring c back.
// Another node's word on c changes nothing for the store's event.
TEST_F(CoordinatorTest, AWaitingChildIsDroppedByItsOwnNodesLaterWordOnIt) {
  const auto abc = Chain(1, 3);
  WorkerEvictsChain(abc);
  ASSERT_EQ(Publish("s1", 0, {Stored({abc[2]}, abc[1], Tier::kHost)}).verdict,
            BatchVerdict::kApply);
  ASSERT_EQ(Publish("w1", 1 + abc.size(), {Removed({abc[2]})}).verdict, BatchVerdict::kApply);
  EXPECT_EQ(coordinator_->Stats().waiting_blocks, 1u)
      << "the worker's removal is not the store's word";
  ASSERT_EQ(Publish("s1", 1, {Removed({abc[2]}, Tier::kHost)}).verdict, BatchVerdict::kApply);
  EXPECT_EQ(coordinator_->Stats().waiting_blocks, 0u);
  EXPECT_EQ(coordinator_->Stats().orphaned_blocks, 0u) << "c is gone: nothing was lost";
  ASSERT_EQ(Publish("s1", 2, {Stored({abc[0], abc[1]}, std::nullopt, Tier::kHost)}).verdict,
            BatchVerdict::kApply);
  EXPECT_EQ(Matched(abc), 2u) << "c was removed: it does not come back with its parent";
  EXPECT_EQ(coordinator_->Stats().adopted_blocks, 0u);
}

// The store demotes c while it waits: the disk's store of c, then the host's removal.
// The copy below stays true and is indexed when c's parent comes; so within one batch.
TEST_F(CoordinatorTest, AWaitingCopyBelowOutlivesItsRemovalAbove) {
  const auto abc = Chain(1, 3);
  WorkerEvictsChain(abc);
  ASSERT_EQ(Publish("s1", 0, {Stored({abc[2]}, abc[1], Tier::kDisk)}).verdict,
            BatchVerdict::kApply);
  ASSERT_EQ(Publish("s1", 1, {Removed({abc[2]}, Tier::kHost)}).verdict, BatchVerdict::kApply);
  EXPECT_EQ(coordinator_->Stats().waiting_blocks, 1u);
  ASSERT_EQ(Publish("s1", 2, {Stored({abc[0], abc[1]}, std::nullopt, Tier::kHost)}).verdict,
            BatchVerdict::kApply);
  EXPECT_EQ(Matched(abc), 3u);
  EXPECT_EQ(coordinator_->Stats().adopted_blocks, 1u);
  EXPECT_EQ(coordinator_->Stats().orphaned_blocks, 0u);
}

TEST_F(CoordinatorTest, AChildDemotedWithinTheBatchThatBringsItsParentIsIndexedBelow) {
  const auto ab = Chain(1, 2);
  EXPECT_EQ(OrphansOfOneBatch({Stored({ab[1]}, ab[0], Tier::kHost),
                               Stored({ab[1]}, ab[0], Tier::kDisk), Removed({ab[1]}, Tier::kHost),
                               Stored({ab[0]}, std::nullopt, Tier::kHost)}),
            0u);
  EXPECT_EQ(Matched(ab), 2u);
}

// A waiting child whose parent comes only after the orphan wait stays out; so does one
// whose node leaves meanwhile.
TEST_F(CoordinatorTest, AWaitingChildGivesUpAfterTheWaitOrWhenItsNodeLeaves) {
  const auto abc = Chain(1, 3), xy = Chain(10, 2);
  WorkerEvictsChain(abc);
  ASSERT_EQ(Publish("s1", 0, {Stored({abc[2]}, abc[1], Tier::kHost)}).verdict,
            BatchVerdict::kApply);
  EXPECT_EQ(OrphansOnceTheWaitIsOver(), 1u);
  ASSERT_EQ(Publish("s1", 1, {Stored({abc[0], abc[1]}, std::nullopt, Tier::kHost)}).verdict,
            BatchVerdict::kApply);
  EXPECT_EQ(Matched(abc), 2u);
  // A second store parks y under x, and leaves: y goes with it, counted nowhere.
  const uint64_t lease = Join("s2", 1, NodeRole::kStore);
  ASSERT_EQ(Publish("s2", 0, {Stored({xy[1]}, xy[0], Tier::kHost)}).verdict, BatchVerdict::kApply);
  EXPECT_EQ(coordinator_->Stats().waiting_blocks, 1u);
  ASSERT_TRUE(coordinator_->Leave("s2", lease).ok());
  EXPECT_EQ(coordinator_->Stats().waiting_blocks, 0u);
  ASSERT_EQ(Publish("s1", 2, {Stored({xy[0]}, std::nullopt, Tier::kHost)}).verdict,
            BatchVerdict::kApply);
  EXPECT_EQ(Matched(xy), 1u);
  EXPECT_EQ(coordinator_->Stats().orphaned_blocks, 1u);
}

// With no wait configured, such a child is left out at once, as before the wait existed.
TEST_F(CoordinatorTest, WithNoOrphanWaitAChildIsLeftOutAtOnce) {
  orphan_wait_ = Nanos(0);
  Restart();
  const auto abc = Chain(1, 3);
  WorkerEvictsChain(abc);
  ASSERT_EQ(Publish("s1", 0, {Stored({abc[2]}, abc[1], Tier::kHost)}).verdict,
            BatchVerdict::kApply);
  EXPECT_EQ(coordinator_->Stats().waiting_blocks, 0u);
  EXPECT_EQ(coordinator_->Stats().orphaned_blocks, 1u);
  ASSERT_EQ(Publish("s1", 1, {Stored({abc[0], abc[1]}, std::nullopt, Tier::kHost)}).verdict,
            BatchVerdict::kApply);
  EXPECT_EQ(Matched(abc), 2u);
}

// A snapshot's block whose parent no node holds waits as an event's would.
TEST_F(CoordinatorTest, ASnapshotBlockWhoseParentIsHeldNowhereWaitsForIt) {
  const auto ab = Chain(1, 2);
  Join("w1");
  Result<RegisterResult> store = coordinator_->Register({"s1", NodeRole::kStore, 1});
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(
      coordinator_->PublishSnapshot({"s1", 1, 0, {{ab[1], ab[0], 0, Tier::kHost, 0, {}}}}).ok());
  EXPECT_EQ(coordinator_->Stats().waiting_blocks, 1u);
  ASSERT_EQ(Publish("w1", 0, {Stored({ab[0]})}).verdict, BatchVerdict::kApply);
  EXPECT_EQ(Matched(ab), 2u);
  EXPECT_EQ(coordinator_->Stats().adopted_blocks, 1u);
}

// A stored event never moves past another event of its own block in its place: b stored,
// then removed, then its parent a stored. b is not applied after its own removal (it
// would come back): it stays out, at no loss. Moved to the host instead, b is held
// there unindexed: an orphan.
TEST_F(CoordinatorTest, AChildWaitsForItsParentOnlyWhereNoEventOfItsOwnBlockLiesBetween) {
  const auto ab = Chain(1, 2);
  EXPECT_EQ(OrphansOfOneBatch({Stored({ab[1]}, ab[0]), Removed({ab[1]}), Stored({ab[0]})}), 0u);
  EXPECT_EQ(Matched(ab), 1u);
  Restart();
  EXPECT_EQ(OrphansOfOneBatch(
                {Stored({ab[1]}, ab[0]), Moved({ab[1]}, Tier::kGpu, Tier::kHost), Stored({ab[0]})}),
            1u);
  EXPECT_EQ(Matched(ab), 1u);
}

// c waits for b, and b then waits for a, two events on: c would move with b past its own
// removal (event 2) and come back. It stays out; a and b are indexed.
TEST_F(CoordinatorTest, AWaitingChildDoesNotMoveWithItsParentPastItsOwnRemoval) {
  const auto abc = Chain(1, 3);
  EXPECT_EQ(OrphansOfOneBatch({Stored({abc[2]}, abc[1]), Stored({abc[1]}, abc[0]),
                               Removed({abc[2]}), Stored({abc[0]})}),
            0u);
  EXPECT_EQ(Matched(abc), 2u);
  // Moved to the host instead of removed, c is held there unindexed: an orphan.
  Restart();
  EXPECT_EQ(OrphansOfOneBatch({Stored({abc[2]}, abc[1]), Stored({abc[1]}, abc[0]),
                               Moved({abc[2]}, Tier::kGpu, Tier::kHost), Stored({abc[0]})}),
            1u);
  EXPECT_EQ(Matched(abc), 2u);
}

// d waits for c, c for b, b for a. c's store is then removed before a comes: c stays out
// at no loss, but d, whose parent is now held nowhere, is an orphan.
TEST_F(CoordinatorTest, AChildWaitingForABlockItsNodeRemovedIsAnOrphan) {
  const auto abcd = Chain(1, 4);
  EXPECT_EQ(OrphansOfOneBatch({Stored({abcd[3]}, abcd[2]), Stored({abcd[2]}, abcd[1]),
                               Stored({abcd[1]}, abcd[0]), Removed({abcd[2]}), Stored({abcd[0]})}),
            1u);
  EXPECT_EQ(Matched(abcd), 2u);
}

// e waits for d's host copy, d for c, c for b. Before b comes, d leaves the host for the
// disk: its host store stays out, and e, parked, is taken in by d's store to disk (which
// waits for c in turn: two adopted).
TEST_F(CoordinatorTest, AChildOfACopyThatMovedDownIsTakenInByTheCopyBelow) {
  const auto bcde = Chain(1, 4);
  const auto &b = bcde[0], &c = bcde[1], &d = bcde[2], &e = bcde[3];
  EXPECT_EQ(
      OrphansOfOneBatch({Stored({e}, d, Tier::kHost), Stored({d}, c, Tier::kHost),
                         Stored({c}, b, Tier::kHost), Removed({d}, Tier::kHost),
                         Stored({d}, c, Tier::kDisk), Stored({b}, std::nullopt, Tier::kHost)}),
      0u);
  EXPECT_EQ(Matched(bcde), 4u);
  EXPECT_EQ(coordinator_->Stats().adopted_blocks, 2u);
}

// A child waiting for a parent whose own store stays out (its parent, x, is held nowhere)
// looks on past it, finds no other store of its parent, and stays out too.
TEST_F(CoordinatorTest, AChildOfAnOrphanInTheSameBatchIsAnOrphanToo) {
  const auto bc = Chain(2, 2);
  const BlockKey x = Chain(9, 1)[0];
  EXPECT_EQ(OrphansOfOneBatch({Stored({bc[1]}, bc[0]), Stored({bc[0]}, x)}), 2u);
  EXPECT_EQ(Matched(bc), 0u);
}

TEST_F(CoordinatorTest, AStoredEventPastTheIndexLimitIsLeftOutAndTheStreamGoesOn) {
  RestartWithIndexLimit(4);
  Join("w1");
  const uint64_t resyncs = coordinator_->Stats().membership.resyncs;
  const auto abc = Chain(1, 3), xyz = Chain(10, 3);
  // Event 0: blocks a,b,c (3 of 4). Event 1: x,y,z would make 6: left out. Event 2 takes
  // c away; event 3 stores x alone (4 of 4).
  const EventAck ack =
      Publish("w1", 0, {Stored(abc), Stored(xyz), Removed({abc[2]}), Stored({xyz[0]})});
  EXPECT_EQ(ack.verdict, BatchVerdict::kApply);
  EXPECT_EQ(ack.next_sequence, 4u);
  EXPECT_EQ(Matched(abc), 2u);
  EXPECT_EQ(Matched(xyz), 1u);
  const CoordinatorStats stats = coordinator_->Stats();
  EXPECT_EQ(stats.index.refused_full, 1u);
  EXPECT_EQ(stats.index.blocks, 3u);
  EXPECT_EQ(stats.membership.resyncs, resyncs)
      << "a full index is no lost event: no snapshot is asked";
}

TEST_F(CoordinatorTest, AChildOfALeftOutChainIsLeftOutTooWithoutAResync) {
  RestartWithIndexLimit(4);
  Join("w1");
  const uint64_t resyncs = coordinator_->Stats().membership.resyncs;
  const auto abc = Chain(1, 3), xyz = Chain(10, 3), pq = Chain(20, 2);
  // a,b,c fit (3 of 4); x,y,z do not; then the node extends z with p and y with q (a
  // branch): both parents were left out, so both are left out; no event was lost.
  const EventAck ack = Publish(
      "w1", 0, {Stored(abc), Stored(xyz), Stored({pq[0]}, xyz[2]), Stored({pq[1]}, xyz[1])});
  EXPECT_EQ(ack.verdict, BatchVerdict::kApply);
  EXPECT_EQ(ack.next_sequence, 4u);
  // A grandchild as well, in the next batch; then c is removed and a fresh chain fits.
  const auto fresh = Chain(30, 1);
  EXPECT_EQ(
      Publish("w1", 4, {Stored(Chain(21, 1), pq[0]), Removed({abc[2]}), Stored(fresh)}).verdict,
      BatchVerdict::kApply);
  EXPECT_EQ(Matched(fresh), 1u);
  EXPECT_EQ(Matched(xyz), 0u);
  const CoordinatorStats stats = coordinator_->Stats();
  EXPECT_EQ(stats.index.refused_full, 1u);
  EXPECT_EQ(stats.refused_children, 3u);
  EXPECT_EQ(stats.membership.resyncs, resyncs)
      << "a full index is no lost event: no snapshot is asked";
}

TEST_F(CoordinatorTest, AnUnknownParentThatWasNotLeftOutMakesAnOrphanNotARefusedChild) {
  RestartWithIndexLimit(4);
  Join("w1");
  const auto abcd = Chain(1, 4), xy = Chain(10, 2);
  // The index is full (a,b,c,d); y's parent x was never stored: y is an orphan, which
  // the full index has nothing to do with.
  EXPECT_EQ(Publish("w1", 0, {Stored(abcd)}).verdict, BatchVerdict::kApply);
  EXPECT_EQ(Publish("w1", 1, {Stored({xy[1]}, xy[0])}).verdict, BatchVerdict::kApply);
  EXPECT_EQ(coordinator_->Stats().refused_children, 0u);
  EXPECT_EQ(OrphansOnceTheWaitIsOver(), 1u);
}

TEST_F(CoordinatorTest, BlocksASnapshotCouldNotFitTakeTheirChildrenOutToo) {
  RestartWithIndexLimit(2);
  Join("w1");
  const auto abc = Chain(1, 3), d = Chain(4, 1);
  ASSERT_EQ(Publish("w1", 0, {Stored({abc[0]})}).verdict, BatchVerdict::kApply);
  ASSERT_EQ(Publish("w1", 5, {Stored({abc[1]}, abc[0])}).verdict,
            BatchVerdict::kSnapshotRequired);  // a gap
  // The snapshot holds a,b,c; the index has room for two: c is left out.
  ASSERT_TRUE(coordinator_->PublishSnapshot({"w1", 1, 6, GpuChainBlocks(abc)}).ok());
  EXPECT_EQ(Matched(abc), 2u);
  const uint64_t resyncs = coordinator_->Stats().membership.resyncs;
  // The node extends c with d: left out, no second snapshot.
  EXPECT_EQ(Publish("w1", 6, {Stored(d, abc[2])}).verdict, BatchVerdict::kApply);
  EXPECT_EQ(coordinator_->Stats().membership.resyncs, resyncs);
  EXPECT_EQ(coordinator_->Stats().refused_children, 1u);
}

TEST_F(CoordinatorTest, WhatWasLeftOutForANodeIsForgottenWhenItsHoldingsAreReplaced) {
  RestartWithIndexLimit(2);
  Join("w1");
  const auto ab = Chain(1, 2), xyz = Chain(10, 3);
  ASSERT_EQ(Publish("w1", 0, {Stored(ab), Stored(xyz)}).verdict,
            BatchVerdict::kApply);  // x,y,z left out
  // The node restarts (incarnation 2) with nothing cached: its old blocks are gone, and a
  // child of z now names a parent nobody holds: an orphan, not a child of a refused block.
  ASSERT_TRUE(coordinator_->Register({"w1", NodeRole::kWorker, 2}).ok());
  ASSERT_TRUE(coordinator_->PublishSnapshot({"w1", 2, 0, {}}).ok());
  const uint64_t refused_children = coordinator_->Stats().refused_children;
  EXPECT_EQ(Publish("w1", 0, {Stored(Chain(20, 1), xyz[2])}, 2).verdict, BatchVerdict::kApply);
  EXPECT_EQ(coordinator_->Stats().refused_children, refused_children);
  EXPECT_EQ(OrphansOnceTheWaitIsOver(), 1u);
}

}  // namespace
}  // namespace kvtier::coordinator
