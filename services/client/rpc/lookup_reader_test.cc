// The SDK reads a lookup's answer in either form (the compact one it asks for, the full
// one an older coordinator sends) into the same result, and refuses an answer that
// contradicts itself, saying what was wrong.
#include "services/client/rpc/lookup_reader.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include "services/rpc/schema_convert.h"

namespace kvtier::client {
namespace {

namespace schema = rpc::schema;

const OpaqueKeyNamespace kNamespace("test", "");

// Blocks 1 and 2 matched: block 1 on worker-a's GPU pool 2 and in store-1's host memory,
// block 2 on worker-a only.
const std::vector<std::vector<Location>> kExpected = {
    {{"worker-a", Tier::kGpu, 2}, {"store-1", Tier::kHost, 0}},
    {{"worker-a", Tier::kGpu, 2}},
};

class LookupReaderTest : public ::testing::Test {
 protected:
  ~LookupReaderTest() noexcept override =
      default;  // the message builder's may throw; it does not here

  schema::LookupResult::Builder Answer() { return message_.initRoot<schema::LookupResult>(); }

  // The compact form: a node table, one word per location, where each block's end.
  schema::LookupResult::Builder Compact() {
    auto r = Answer();
    r.setMatchedBlocks(2);
    auto nodes = r.initNodes(2);
    nodes.set(0, "worker-a");
    nodes.set(1, "store-1");
    auto locations = r.initLocations(3);
    SetCompact(locations[0], 0, schema::Tier::GPU, 2);
    SetCompact(locations[1], 1, schema::Tier::HOST, 0);
    SetCompact(locations[2], 0, schema::Tier::GPU, 2);
    auto ends = r.initLocationEnds(2);
    ends.set(0, 2);
    ends.set(1, 3);
    auto scores = r.initScores(1);
    scores[0].setNodeId("worker-a");
    scores[0].setPrefixBlocks(2);
    scores[0].setScore(2.0);
    return r;
  }

  // The full form, as a coordinator without the compact one answers.
  schema::LookupResult::Builder Full() {
    auto r = Answer();
    r.setMatchedBlocks(2);
    auto blocks = r.initBlocks(2);
    for (unsigned i = 0; i < 2; ++i) {
      rpc::FromKey(kNamespace.Key(i + 1), blocks[i].initKey());
      auto locations = blocks[i].initLocations(static_cast<unsigned>(kExpected[i].size()));
      for (unsigned j = 0; j < kExpected[i].size(); ++j) {
        locations[j].setNodeId(kExpected[i][j].node_id);
        locations[j].setTier(static_cast<schema::Tier>(kExpected[i][j].tier));
        locations[j].setPoolId(kExpected[i][j].pool_id);
      }
    }
    return r;
  }

  static void SetCompact(schema::CompactLocation::Builder l, uint16_t node, schema::Tier tier,
                         uint32_t pool) {
    l.setNode(node);
    l.setTier(tier);
    l.setPoolId(pool);
  }

  // The answer's error, which must name what was wrong.
  static void ExpectRefused(schema::LookupResult::Reader r, const std::string& what) {
    Result<LookupResult> read = ReadLookupAnswer(r);
    ASSERT_FALSE(read.ok()) << "expected refusal: " << what;
    EXPECT_EQ(read.status().code(), StatusCode::kInternal);
    EXPECT_NE(read.status().message().find(what), std::string::npos) << read.status();
  }

  capnp::MallocMessageBuilder message_;
};

TEST_F(LookupReaderTest, TheCompactFormReadsIntoEachBlocksLocations) {
  Result<LookupResult> read = ReadLookupAnswer(Compact().asReader());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->matched_blocks, 2u);
  EXPECT_EQ(read->locations, kExpected);
  ASSERT_EQ(read->scores.size(), 1u);
  EXPECT_EQ(read->scores[0].node_id, "worker-a");
  EXPECT_EQ(read->scores[0].prefix_blocks, 2u);
}

TEST_F(LookupReaderTest, AnOlderCoordinatorsFullFormReadsTheSame) {
  auto r = Full();
  auto partial = r.initPartialBlock();
  rpc::FromKey(kNamespace.Key(3), partial.initKey());
  partial.initLocations(1)[0].setNodeId("worker-a");
  r.setPartialMatchTokens(5);
  r.setPartialBlockTokens(16);
  Result<LookupResult> read = ReadLookupAnswer(r.asReader());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->locations, kExpected);
  EXPECT_EQ(read->partial_match_tokens, 5u);
  EXPECT_EQ(read->partial_block_tokens, 16u);
  EXPECT_EQ(read->partial_block_key, kNamespace.Key(3));
  EXPECT_EQ(read->partial_block_locations, (std::vector<Location>{{"worker-a", Tier::kGpu, 0}}));
}

TEST_F(LookupReaderTest, NothingMatchedReadsAsNoLocations) {
  Answer().setMatchedBlocks(0);
  Result<LookupResult> read = ReadLookupAnswer(message_.getRoot<schema::LookupResult>().asReader());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->locations.empty());
}

TEST_F(LookupReaderTest, BlockCountsThatDisagreeAreRefused) {
  auto compact = Compact();
  compact.setMatchedBlocks(3);
  ExpectRefused(compact.asReader(), "lists 2 blocks' locations for 3 matched blocks");
  auto full = Full();
  full.setMatchedBlocks(1);
  ExpectRefused(full.asReader(), "lists 2 blocks' locations for 1 matched blocks");
}

TEST_F(LookupReaderTest, BlockEndsOutOfOrderOrPastTheLocationsAreRefused) {
  auto r = Compact();
  r.getLocationEnds().set(1, 4);  // 3 locations listed
  ExpectRefused(r.asReader(), "ends block 1's locations at 4, outside [2, 3]");
  r.getLocationEnds().set(1, 1);  // before block 1's start
  ExpectRefused(r.asReader(), "ends block 1's locations at 1, outside [2, 3]");
}

TEST_F(LookupReaderTest, ANodeIndexPastTheTableIsRefused) {
  auto r = Compact();
  r.getLocations()[2].setNode(2);  // two nodes listed
  ExpectRefused(r.asReader(), "names node 2 of a table of 2");
}

TEST_F(LookupReaderTest, AnUnknownTierIsRefusedNotGuessed) {
  auto compact = Compact();
  compact.getLocations()[1].setTier(static_cast<schema::Tier>(7));
  ExpectRefused(compact.asReader(), "unknown tier 7");
  auto full = Full();
  full.getBlocks()[0].getLocations()[0].setTier(static_cast<schema::Tier>(9));
  ExpectRefused(full.asReader(), "unknown tier 9");
}

}  // namespace
}  // namespace kvtier::client
