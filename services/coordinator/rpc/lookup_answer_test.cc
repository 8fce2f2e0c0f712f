// A lookup's answer on the wire, in its two forms: the same locations either way, the
// compact form naming each node once, and each answer fitting the size it announced.
#include "services/coordinator/rpc/lookup_answer.h"

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "services/rpc/schema_convert.h"

namespace kvtier::coordinator {
namespace {

namespace schema = rpc::schema;
using Place = std::tuple<std::string, schema::Tier, uint32_t>;  // node, tier, pool
using Places = std::vector<std::vector<Place>>;                 // per matched block

const OpaqueKeyNamespace kNamespace("test", "");

std::vector<BlockKey> Chain(uint64_t first, size_t n) {
  std::vector<BlockKey> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(kNamespace.Key(first + i));
  return keys;
}

KvEvent Stored(std::vector<BlockKey> keys, std::optional<BlockKey> parent, Tier tier,
               uint16_t pool = 0) {
  KvEvent e;
  e.kind = KvEvent::Kind::kStored;
  e.keys = std::move(keys);
  e.parent = parent;
  e.tier = tier;
  e.pool = pool;
  return e;
}

// An answer built the way the RPC layer builds it: in a message whose first segment is
// the size the writer announced (plus the message's root pointer).
struct BuiltAnswer {
  std::unique_ptr<capnp::MallocMessageBuilder> message;
  uint64_t announced_words = 0;

  schema::LookupResult::Reader result() {
    return message->getRoot<schema::Coordinator::LookupResults>().getResult();
  }
  size_t segments() { return message->getSegmentsForOutput().size(); }
  uint64_t used_words() {
    return message->getSegmentsForOutput()[0].size() - 1;
  }  // less the root pointer
};

class LookupAnswerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.index.clock = &clock_;
    options.membership.clock = &clock_;
    coordinator_ = *Coordinator::Create(options);
    writer_.emplace(*coordinator_);
    // Three nodes: a worker with blocks 1-3 in its GPU pool 2, a store with blocks 1-2 in
    // host memory and block 3 on disk, and a worker holding only blocks of another prompt.
    Join("worker-a", {Stored(Chain(1, 3), std::nullopt, Tier::kGpu, 2)});
    Join("a-store-with-a-longer-name", {Stored(Chain(1, 2), std::nullopt, Tier::kHost),
                                        Stored(Chain(3, 1), kNamespace.Key(2), Tier::kDisk)});
    Join("worker-b", {Stored(Chain(100, 2), std::nullopt, Tier::kGpu)});
    // Block 4 follows block 3 on worker-a, holding tokens 40 and 41: a partial match.
    KvEvent with_tokens = Stored(Chain(4, 1), kNamespace.Key(3), Tier::kGpu, 2);
    with_tokens.tokens = {40, 41};
    ASSERT_TRUE(coordinator_->PublishEvents({"worker-a", 1, 1, {with_tokens}}).ok());
  }

  void Join(const std::string& node, std::vector<KvEvent> events) {
    ASSERT_TRUE(coordinator_->Register({node, NodeRole::kWorker, 1}).ok());
    ASSERT_TRUE(coordinator_->PublishSnapshot({node, 1, 0, {}}).ok());
    ASSERT_TRUE(coordinator_->PublishEvents({node, 1, 0, std::move(events)}).ok());
  }

  BuiltAnswer Write(const LookupResult& result, std::span<const BlockKey> keys,
                    LookupAnswerForm form) {
    BuiltAnswer built;
    writer_->Write(result, keys, form, [&](capnp::MessageSize size) {
      built.announced_words = size.wordCount;
      built.message =
          std::make_unique<capnp::MallocMessageBuilder>(static_cast<unsigned>(size.wordCount + 1));
      return built.message->initRoot<schema::Coordinator::LookupResults>().initResult();
    });
    return built;
  }

  static Places FullPlaces(schema::LookupResult::Reader r) {
    Places out;
    for (auto block : r.getBlocks()) {
      out.emplace_back();
      for (auto l : block.getLocations())
        out.back().emplace_back(l.getNodeId().cStr(), l.getTier(), l.getPoolId());
    }
    return out;
  }

  static Places CompactPlaces(schema::LookupResult::Reader r) {
    Places out;
    uint32_t begin = 0;
    for (const uint32_t end : r.getLocationEnds()) {
      out.emplace_back();
      for (uint32_t i = begin; i < end; ++i) {
        const auto l = r.getLocations()[i];
        out.back().emplace_back(r.getNodes()[l.getNode()].cStr(), l.getTier(), l.getPoolId());
      }
      begin = end;
    }
    return out;
  }

  FakeClock clock_{std::chrono::seconds(100)};
  std::unique_ptr<Coordinator> coordinator_;
  std::optional<LookupAnswerWriter> writer_;
};

const std::string kStore = "a-store-with-a-longer-name";
const Places kBlocks1To3 = {
    {{"worker-a", schema::Tier::GPU, 2}, {kStore, schema::Tier::HOST, 0}},
    {{"worker-a", schema::Tier::GPU, 2}, {kStore, schema::Tier::HOST, 0}},
    {{"worker-a", schema::Tier::GPU, 2}, {kStore, schema::Tier::DISK, 0}},
};

TEST_F(LookupAnswerTest, TheCompactFormNamesEachNodeOnceAndKeepsEveryLocation) {
  const std::vector<BlockKey> keys =
      Chain(1, 5);  // blocks 1-3 cached, block 4 only on worker-a, 5 new
  const LookupResult result = coordinator_->Lookup(0, keys);
  ASSERT_EQ(result.matched_blocks, 4u);

  BuiltAnswer compact = Write(result, keys, LookupAnswerForm::kCompact);
  const auto r = compact.result();
  EXPECT_EQ(r.getMatchedBlocks(), 4u);
  EXPECT_FALSE(r.hasBlocks()) << "the compact form echoes no keys";
  ASSERT_EQ(r.getNodes().size(), 2u) << "worker-b holds nothing of this prompt";
  EXPECT_EQ(std::string(r.getNodes()[0].cStr()), "worker-a");
  EXPECT_EQ(std::string(r.getNodes()[1].cStr()), kStore);
  EXPECT_EQ(r.getLocations().size(), 7u);
  Places expected = kBlocks1To3;
  expected.push_back({{"worker-a", schema::Tier::GPU, 2}});
  EXPECT_EQ(CompactPlaces(r), expected);
  ASSERT_EQ(r.getScores().size(), 2u);
  EXPECT_EQ(std::string(r.getScores()[0].getNodeId().cStr()), "worker-a");
  EXPECT_EQ(r.getScores()[0].getPrefixBlocks(), 4u);
}

TEST_F(LookupAnswerTest, TheFullFormEchoesEachBlocksKeyAndNamesEveryLocation) {
  const std::vector<BlockKey> keys = Chain(1, 4);
  const LookupResult result = coordinator_->Lookup(0, keys);

  BuiltAnswer full = Write(result, keys, LookupAnswerForm::kFull);
  const auto r = full.result();
  EXPECT_FALSE(r.hasNodes());
  EXPECT_FALSE(r.hasLocations());
  EXPECT_FALSE(r.hasLocationEnds());
  ASSERT_EQ(r.getBlocks().size(), 4u);
  for (unsigned i = 0; i < 4; ++i)
    EXPECT_EQ(rpc::ToKey(r.getBlocks()[i].getKey()), keys[i]) << "block " << i;
  Places expected = kBlocks1To3;
  expected.push_back({{"worker-a", schema::Tier::GPU, 2}});
  EXPECT_EQ(FullPlaces(r), expected);
  EXPECT_EQ(FullPlaces(r), CompactPlaces(Write(result, keys, LookupAnswerForm::kCompact).result()));
}

TEST_F(LookupAnswerTest, APartialMatchIsNamedInEitherForm) {
  const std::vector<BlockKey> keys = Chain(1, 3);
  const std::vector<uint32_t> tail = {40, 99};  // block 4 begins with 40, then has 41
  const LookupResult result = coordinator_->Lookup(0, keys, tail);
  ASSERT_EQ(result.partial.tokens, 1u);
  for (const LookupAnswerForm form : {LookupAnswerForm::kFull, LookupAnswerForm::kCompact}) {
    BuiltAnswer built = Write(result, keys, form);
    const auto r = built.result();
    EXPECT_EQ(r.getPartialMatchTokens(), 1u);
    EXPECT_EQ(r.getPartialBlockTokens(), 2u);
    EXPECT_EQ(rpc::ToKey(r.getPartialBlock().getKey()), kNamespace.Key(4));
    ASSERT_EQ(r.getPartialBlock().getLocations().size(), 1u);
    EXPECT_EQ(std::string(r.getPartialBlock().getLocations()[0].getNodeId().cStr()), "worker-a");
    EXPECT_EQ(r.getPartialBlock().getLocations()[0].getPoolId(), 2u);
  }
}

TEST_F(LookupAnswerTest, EveryAnswerTakesExactlyTheSizeItAnnounced) {
  struct Case {
    const char* what;
    std::vector<BlockKey> keys;
    std::vector<uint32_t> tail;
  };
  const std::vector<Case> cases = {
      {"nothing matched", Chain(50, 3), {}},
      {"blocks 1-4 matched", Chain(1, 5), {}},
      {"blocks 1-3 and a partial block", Chain(1, 3), {40}},
      {"no keys, a partial first block", {}, {1, 2}},
  };
  for (const Case& c : cases) {
    const LookupResult result = coordinator_->Lookup(0, c.keys, c.tail);
    for (const LookupAnswerForm form : {LookupAnswerForm::kFull, LookupAnswerForm::kCompact}) {
      BuiltAnswer built = Write(result, c.keys, form);
      const char* form_name = form == LookupAnswerForm::kFull ? "full" : "compact";
      EXPECT_EQ(built.segments(), 1u)
          << c.what << ", " << form_name << ": the answer outgrew its announced size";
      EXPECT_EQ(built.announced_words, built.used_words())
          << c.what << ", " << form_name << ": the size is exact";
    }
  }
}

TEST_F(LookupAnswerTest, TheNodeTableStartsAfreshForEachAnswer) {
  const std::vector<BlockKey> prompt_a = Chain(1, 1);    // block 1: worker-a's and the store's
  const std::vector<BlockKey> prompt_b = Chain(100, 2);  // worker-b's blocks only
  const Places places_a = {kBlocks1To3[0]};
  const Places places_b = {{{"worker-b", schema::Tier::GPU, 0}},
                           {{"worker-b", schema::Tier::GPU, 0}}};
  // Prompt a, then b, then a again: each answer lists exactly the nodes it names.
  for (const auto& [prompt, places, nodes] :
       {std::tuple{prompt_a, places_a, 2u}, std::tuple{prompt_b, places_b, 1u},
        std::tuple{prompt_a, places_a, 2u}}) {
    BuiltAnswer answer = Write(coordinator_->Lookup(0, prompt), prompt, LookupAnswerForm::kCompact);
    ASSERT_EQ(answer.result().getNodes().size(), nodes);
    EXPECT_EQ(CompactPlaces(answer.result()), places);
  }
}

}  // namespace
}  // namespace kvtier::coordinator
