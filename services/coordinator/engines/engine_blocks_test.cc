#include "services/coordinator/engines/engine_blocks.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace kvtier::coordinator {
namespace {

std::vector<uint32_t> Iota(uint32_t n, uint32_t first = 1000) {
  std::vector<uint32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// A BlockStored of `n` engine blocks of `size` tokens taken from `tokens` at
// `offset`.
EngineBlockStored Stored(std::vector<uint64_t> hashes, std::optional<uint64_t> parent,
                         const std::vector<uint32_t>& tokens, size_t offset, uint32_t size) {
  EngineBlockStored s;
  for (uint64_t h : hashes) s.hashes.push_back(EngineHash{0, h});
  if (parent) s.parent = EngineHash{0, *parent};
  s.block_size = size;
  s.tokens.assign(tokens.begin() + offset, tokens.begin() + offset + hashes.size() * size);
  return s;
}

EngineBlockRemoved Removed(std::vector<uint64_t> hashes, std::string medium = "GPU",
                           uint32_t group = 0) {
  EngineBlockRemoved r;
  for (uint64_t h : hashes) r.hashes.push_back(EngineHash{0, h});
  r.medium = std::move(medium);
  r.group = group;
  return r;
}

std::vector<BlockKey> StoredKeys(const std::vector<KvEvent>& events, Tier tier = Tier::kGpu) {
  std::vector<BlockKey> keys;
  for (const KvEvent& e : events) {
    if (e.kind == KvEvent::Kind::kStored && e.tier == tier)
      keys.insert(keys.end(), e.keys.begin(), e.keys.end());
  }
  return keys;
}

std::vector<BlockKey> RemovedKeys(const std::vector<KvEvent>& events, Tier tier = Tier::kGpu) {
  std::vector<BlockKey> keys;
  for (const KvEvent& e : events) {
    if (e.kind == KvEvent::Kind::kRemoved && e.tier == tier)
      keys.insert(keys.end(), e.keys.begin(), e.keys.end());
  }
  return keys;
}

EngineKeySpace Space(uint32_t tpb = 4, std::string tenant = "team-a") {
  return {.tenant = KeySalt(tenant), .model = "llama-3-8b", .tokens_per_block = tpb};
}

TEST(EngineBlockMapTest, ChainsAcrossEventsGiveTheKeysAGatewayComputes) {
  const std::vector<uint32_t> tokens = Iota(16);
  EngineBlockMap map({.space = Space()});
  std::vector<KvEvent> out;
  map.Apply(Stored({1, 2}, std::nullopt, tokens, 0, 4), out);
  map.Apply(Stored({3, 4}, 2, tokens, 8, 4), out);
  EXPECT_EQ(StoredKeys(out), EnginePromptKeys(Space(), tokens, {}));
  ASSERT_EQ(out.size(), 1u) << "a chain continued by the next event extends its stored event";
  EXPECT_FALSE(out[0].parent.has_value()) << "a chain from the root has no parent";
  EXPECT_EQ(out[0].tokens, tokens);
  std::vector<KvEvent> child;
  map.Apply(Stored({5}, 4, Iota(20), 16, 4), child);
  ASSERT_EQ(child.size(), 1u);
  EXPECT_EQ(child[0].parent, out[0].keys.back());
  EXPECT_EQ(map.blocks(), 5u);
}

TEST(EngineBlockMapTest, TenantModelSaltAndLoraSeparateKeySpaces) {
  const std::vector<uint32_t> tokens = Iota(8);
  const auto keys = EnginePromptKeys(Space(), tokens, {});
  EXPECT_NE(keys, EnginePromptKeys(Space(4, "team-b"), tokens, {}));
  EXPECT_NE(keys, EnginePromptKeys(Space(), tokens, {.cache_salt = "s"}));
  EXPECT_NE(keys, EnginePromptKeys(Space(), tokens, {.lora_name = "sql"}));
  EngineKeySpace other_model = Space();
  other_model.model = "qwen";
  EXPECT_NE(keys, EnginePromptKeys(other_model, tokens, {}));
}

// vLLM puts lora_name in every block's extra keys and the request's cache_salt
// after it in the first block's: the keys are those a gateway computes from
// (tokens, salt, lora name).
TEST(EngineBlockMapTest, VllmExtraKeysNameTheCacheSaltAndLora) {
  const std::vector<uint32_t> tokens = Iota(8);
  EngineBlockMap map({.space = Space(), .format = EngineFormat::kVllm});
  EngineBlockStored s = Stored({1, 2}, std::nullopt, tokens, 0, 4);
  s.lora_name = "sql";
  s.extra_keys = {{"sql", "salt-9"}, {"sql"}};
  std::vector<KvEvent> out;
  map.Apply(s, out);
  EXPECT_EQ(StoredKeys(out),
            EnginePromptKeys(Space(), tokens, {.cache_salt = "salt-9", .lora_name = "sql"}));

  // The same blocks with an explicit cache_salt field and no extra keys.
  EngineBlockMap explicit_salt({.space = Space(), .format = EngineFormat::kSglang});
  EngineBlockStored e = Stored({1, 2}, std::nullopt, tokens, 0, 4);
  e.cache_salt = "salt-9";
  std::vector<KvEvent> out2;
  explicit_salt.Apply(e, out2);
  EXPECT_EQ(StoredKeys(out2), EnginePromptKeys(Space(), tokens, {.cache_salt = "salt-9"}));
}

TEST(EngineBlockMapTest, MultimodalExtraKeysNeverMatchATextPrompt) {
  const std::vector<uint32_t> tokens = Iota(8);
  EngineBlockMap map({.space = Space(), .format = EngineFormat::kSglang});
  EngineBlockStored s = Stored({1, 2}, std::nullopt, tokens, 0, 4);
  s.extra_keys = {{}, {"\x1fu77"}};
  std::vector<KvEvent> out;
  map.Apply(s, out);
  const auto text = EnginePromptKeys(Space(), tokens, {});
  const auto keys = StoredKeys(out);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], text[0]);
  EXPECT_NE(keys[1], text[1]);
}

TEST(EngineBlockMapTest, LargerEngineBlocksSplitAndSmallerOnesJoin) {
  const std::vector<uint32_t> tokens = Iota(32);
  const auto expected = EnginePromptKeys(Space(4), tokens, {});
  {
    EngineBlockMap split({.space = Space(4)});
    std::vector<KvEvent> out;
    split.Apply(Stored({1}, std::nullopt, tokens, 0, 16), out);
    split.Apply(Stored({2}, 1, tokens, 16, 16), out);
    EXPECT_EQ(StoredKeys(out), expected);
    out.clear();
    split.Apply(Removed({2}), out);
    EXPECT_EQ(RemovedKeys(out), std::vector<BlockKey>(expected.begin() + 4, expected.end()));
  }
  {
    // SGLang's radix cache publishes pages of one token.
    EngineBlockMap join({.space = Space(4)});
    std::vector<KvEvent> out;
    std::vector<uint64_t> pages(32);
    std::iota(pages.begin(), pages.end(), 100);
    join.Apply(
        Stored(std::vector<uint64_t>(pages.begin(), pages.begin() + 6), std::nullopt, tokens, 0, 1),
        out);
    join.Apply(Stored(std::vector<uint64_t>(pages.begin() + 6, pages.end()), 105, tokens, 6, 1),
               out);
    EXPECT_EQ(StoredKeys(out), expected);
    out.clear();
    join.Apply(Removed({131}),
               out);  // the last page completed the last kvtier block
    EXPECT_EQ(RemovedKeys(out), std::vector<BlockKey>{expected.back()});
  }
  {
    // Sizes that divide neither way carry tokens over as well.
    EngineBlockMap odd({.space = Space(4)});
    std::vector<KvEvent> out;
    odd.Apply(Stored({1, 2, 3}, std::nullopt, tokens, 0, 6), out);
    EXPECT_EQ(StoredKeys(out), std::vector<BlockKey>(expected.begin(), expected.begin() + 4));
  }
}

TEST(EngineBlockMapTest, TiersRemovalsAndUnknownBlocks) {
  const std::vector<uint32_t> tokens = Iota(8);
  const auto keys = EnginePromptKeys(Space(), tokens, {});
  EngineBlockMap map({.space = Space()});
  std::vector<KvEvent> out;
  map.Apply(Stored({1, 2}, std::nullopt, tokens, 0, 4), out);
  EngineBlockStored offloaded = Stored({1, 2}, std::nullopt, tokens, 0, 4);
  offloaded.medium = "CPU_PINNED";
  map.Apply(offloaded, out);
  EXPECT_EQ(StoredKeys(out, Tier::kHost), keys) << "the offloaded copy is in the host tier too";
  out.clear();
  map.Apply(Removed({2}, "GPU"), out);
  EXPECT_EQ(RemovedKeys(out, Tier::kGpu), std::vector<BlockKey>{keys[1]});
  EXPECT_TRUE(RemovedKeys(out, Tier::kHost).empty());
  out.clear();
  map.Apply(Removed({2}, "GPU"), out);
  map.Apply(Removed({99}), out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(map.stats().unknown_removed, 2u);

  map.Apply(Stored({7}, 12345, Iota(4), 0, 4),
            out);  // a parent kvtier never saw
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(map.stats().unknown_parent, 1u);
  EngineBlockStored remote = Stored({8}, std::nullopt, Iota(4), 0, 4);
  remote.remote = true;
  map.Apply(remote, out);
  EngineBlockStored tape = Stored({9}, std::nullopt, Iota(4), 0, 4);
  tape.medium = "TAPE";
  map.Apply(tape, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(map.stats().remote_skipped, 1u);
  EXPECT_EQ(map.stats().unknown_medium, 1u);
}

// Groups of a hybrid model store the same tokens: a key leaves a tier when the
// last leaves.
TEST(EngineBlockMapTest, AKeyHeldByTwoGroupsLeavesWithTheLast) {
  const std::vector<uint32_t> tokens = Iota(4);
  EngineBlockMap map({.space = Space()});
  std::vector<KvEvent> out;
  EngineBlockStored g0 = Stored({1}, std::nullopt, tokens, 0, 4);
  EngineBlockStored g1 = Stored({51}, std::nullopt, tokens, 0, 4);
  g1.group = 1;
  map.Apply(g0, out);
  map.Apply(g1, out);
  EXPECT_EQ(StoredKeys(out).size(), 1u);
  out.clear();
  map.Apply(Removed({1}, "GPU", 0), out);
  EXPECT_TRUE(out.empty());
  map.Apply(Removed({51}, "GPU", 1), out);
  EXPECT_EQ(RemovedKeys(out), EnginePromptKeys(Space(), tokens, {}));
}

TEST(EngineBlockMapTest, ClearAndSnapshot) {
  const std::vector<uint32_t> tokens = Iota(12);
  EngineBlockMap map({.space = Space()});
  std::vector<KvEvent> out;
  map.Apply(Stored({1, 2, 3}, std::nullopt, tokens, 0, 4), out);
  const std::vector<SnapshotBlock> snapshot = map.Snapshot();
  ASSERT_EQ(snapshot.size(), 3u);
  std::vector<BlockKey> keys;
  for (const SnapshotBlock& b : snapshot) keys.push_back(b.key);
  std::sort(keys.begin(), keys.end());
  auto expected = EnginePromptKeys(Space(), tokens, {});
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(keys, expected);
  map.Apply(EngineAllCleared{}, out);
  EXPECT_EQ(out.back().kind, KvEvent::Kind::kCleared);
  EXPECT_EQ(map.blocks(), 0u);
  EXPECT_TRUE(map.Snapshot().empty());
}

TEST(EngineBlockMapTest, ABoundedMapLeavesBlocksOut) {
  EngineBlockMap map({.space = Space(), .max_blocks = 2});
  std::vector<KvEvent> out;
  map.Apply(Stored({1, 2, 3}, std::nullopt, Iota(12), 0, 4), out);
  EXPECT_EQ(map.blocks(), 2u);
  EXPECT_EQ(map.stats().full_skipped, 1u);
}

TEST(EngineBlockMapTest, MediaMapToTiers) {
  EXPECT_EQ(TierOfMedium(""), Tier::kGpu);
  EXPECT_EQ(TierOfMedium("GPU"), Tier::kGpu);
  EXPECT_EQ(TierOfMedium("CPU_TIER2"), Tier::kHost);
  EXPECT_EQ(TierOfMedium("STORAGE"), Tier::kDisk);
  EXPECT_EQ(TierOfMedium("floppy"), std::nullopt);
}

}  // namespace
}  // namespace kvtier::coordinator
