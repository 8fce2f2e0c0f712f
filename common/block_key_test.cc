#include "common/block_key.h"

#include <array>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <set>
#include <string>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

std::vector<uint32_t> Tokens(uint32_t first, uint32_t count) {
  std::vector<uint32_t> t(count);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Vectors printed by tests/vectors/block_keys.py, an independent Python implementation of
// the encoding in block_key.h. A change here is a wire-format change: every node and
// every stored block would disagree with the old keys.
TEST(BlockKeyTest, MatchesCommittedVectors) {
  EXPECT_EQ(RootKey("").ToHex(), "3c92586f98ffae7e76bd8875bc359362");
  EXPECT_EQ(RootKey("tenant-a").ToHex(), "7c4e346a1e3c1b3a14f4bde21b199d5a");

  const std::vector<BlockKey> unsalted = ComputeBlockKeys("", Tokens(1, 8), 4);
  ASSERT_EQ(unsalted.size(), 2u);
  EXPECT_EQ(unsalted[0].ToHex(), "039879aeba1dd7aa75a302609a76016e");
  EXPECT_EQ(unsalted[1].ToHex(), "7576a730dbfa5e603700930956c2b7c5");

  const std::vector<BlockKey> salted = ComputeBlockKeys("tenant-a", Tokens(1, 8), 4);
  ASSERT_EQ(salted.size(), 2u);
  EXPECT_EQ(salted[0].ToHex(), "04c5b70240874450c5c7488b83f7396e");
  EXPECT_EQ(salted[1].ToHex(), "76ec326522514cadf908a3ab1cc9c3a3");

  const BlockExtraKeys extra{7, "llama3-8b/bf16", {"img:abc"}};
  const std::vector<BlockKey> with_extra = ComputeBlockKeys("tenant-a", Tokens(1, 8), 4, extra);
  ASSERT_EQ(with_extra.size(), 2u);
  EXPECT_EQ(with_extra[0].ToHex(), "3417349a4daa105f6d0b7a5de568b6ed");
  EXPECT_EQ(with_extra[1].ToHex(), "227ac574eff4da177bcee5833f4e0734");

  EXPECT_EQ(OpaqueKeyNamespace("mooncake", "").Key(42).ToHex(), "9bae8288898f3b9a000000000000002a");

  const KeySalt tenant_a("tenant-a");
  const std::vector<BlockKey> in_a = tenant_a.Apply(unsalted);
  EXPECT_EQ(in_a[0].ToHex(), "362fd99ad48840a59f850c0b9813dd97");
  EXPECT_EQ(in_a[1].ToHex(), "78d23eedc569a6c76b88fe1a08cb4950");
  EXPECT_EQ(tenant_a.Root().ToHex(), "1d476af1060a00a951bff85af637f808");
  EXPECT_EQ(tenant_a.Apply(OpaqueKeyNamespace("mooncake", "").Key(42)).ToHex(),
            "8a63f664a5696223b15ed6be47f9138c");
}

// The servers' map of a client's keys: two tenants' equal keys part, one tenant's keys
// stay distinct and keep their kind, and the empty salt changes nothing.
TEST(BlockKeyTest, KeySaltsPartEqualKeysOfTwoTenants) {
  const std::vector<BlockKey> keys = ComputeBlockKeys("", Tokens(100, 64), 16);
  const std::vector<BlockKey> a = KeySalt("tenant-a").Apply(keys),
                              b = KeySalt("tenant-b").Apply(keys);
  std::set<BlockKey> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  all.insert(keys.begin(), keys.end());
  EXPECT_EQ(all.size(), 12u) << "a key is shared across salts";
  EXPECT_EQ(KeySalt("tenant-a").Apply(keys[2]), a[2]);
  EXPECT_TRUE(KeySalt("").Apply(keys) == keys);
  EXPECT_TRUE(KeySalt().identity());
  EXPECT_EQ(KeySalt().Root(), RootKey(""));
  EXPECT_FALSE(a[0].IsOpaque());
  EXPECT_TRUE(KeySalt("tenant-a").Apply(OpaqueKeyNamespace("mooncake", "").Key(1)).IsOpaque());
}

TEST(BlockKeyTest, SameTokensUnderDifferentSaltsNeverMeet) {
  const std::vector<uint32_t> prompt = Tokens(100, 64);
  const std::vector<BlockKey> a = ComputeBlockKeys("tenant-a", prompt, 16);
  const std::vector<BlockKey> b = ComputeBlockKeys("tenant-b", prompt, 16);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  std::set<BlockKey> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), 8u) << "a key is shared across salts";
}

TEST(BlockKeyTest, SharedPrefixSharesKeysUntilFirstDifference) {
  std::vector<uint32_t> first = Tokens(0, 48);
  std::vector<uint32_t> second = first;
  second[40] = 999;  // block 2 of 16-token blocks differs
  const auto a = ComputeBlockKeys("s", first, 16);
  const auto b = ComputeBlockKeys("s", second, 16);
  EXPECT_EQ(a[0], b[0]);  // blocks 0,1 reused
  EXPECT_EQ(a[1], b[1]);
  EXPECT_NE(a[2], b[2]);  // block 2 new
}

TEST(BlockKeyTest, ExtraKeysAndPartialBlocks) {
  const std::vector<uint32_t> prompt = Tokens(0, 20);
  const auto base = ComputeBlockKeys("s", prompt, 8);
  EXPECT_EQ(base.size(), 2u) << "the partial last block (4 tokens) has no key";
  EXPECT_NE(ComputeBlockKeys("s", prompt, 8, {1, "", {}})[0], base[0])
      << "LoRA id must change the key";
  EXPECT_NE(ComputeBlockKeys("s", prompt, 8, {0, "m/fp8", {}})[0], base[0])
      << "model tag must change the key";
  // Length prefixes keep ("ab","c") and ("a","bc") apart.
  EXPECT_NE(ComputeBlockKeys("s", prompt, 8, {0, "", {"ab", "c"}})[0],
            ComputeBlockKeys("s", prompt, 8, {0, "", {"a", "bc"}})[0]);
}

TEST(BlockKeyTest, OpaqueKeysLiveInTheirOwnNamespace) {
  const OpaqueKeyNamespace mooncake("mooncake", "tenant-a");
  const OpaqueKeyNamespace other_salt("mooncake", "tenant-b");
  EXPECT_TRUE(mooncake.Key(5).IsOpaque());
  EXPECT_FALSE(ComputeBlockKeys("tenant-a", Tokens(0, 16), 16)[0].IsOpaque());
  EXPECT_NE(mooncake.Key(5), other_salt.Key(5));
  EXPECT_EQ(mooncake.Key(5), OpaqueKeyNamespace("mooncake", "tenant-a").Key(5));
}

TEST(BlockKeyTest, HexRoundTripAndErrors) {
  const BlockKey key = ComputeBlockKeys("s", Tokens(0, 16), 16)[0];
  Result<BlockKey> parsed = BlockKey::FromHex(key.ToHex());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, key);
  EXPECT_EQ(BlockKey::FromHex("abc").status().code(), StatusCode::kInvalidArgument);
  // 32 hex digits with a bad one last. Built in place: GCC 12 at -O3 reports a false
  // -Warray-bounds on `std::string(31, '0') + 'g'`.
  std::string bad_last_digit(32, '0');
  bad_last_digit[31] = 'g';
  EXPECT_NE(BlockKey::FromHex(bad_last_digit).status().message().find("position 31"),
            std::string::npos);
}

// Same tokens and salt give the same keys in another process: nothing in the key depends on
// process state (no randomized seeds, no pointer values).
TEST(BlockKeyTest, SameKeysInAnotherProcess) {
  const std::string command = KVTIER_BIN_DIR "/kvtier_block_key_dump tenant-a 4 1 2 3 4 5 6 7 8";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::array<char, 256> line{};
  std::vector<std::string> lines;
  while (std::fgets(line.data(), line.size(), pipe) != nullptr) {
    lines.emplace_back(line.data(), std::strlen(line.data()) - 1);
  }
  ASSERT_EQ(pclose(pipe), 0) << command;
  const auto here = ComputeBlockKeys("tenant-a", Tokens(1, 8), 4);
  ASSERT_EQ(lines.size(), here.size());
  for (size_t i = 0; i < here.size(); ++i) EXPECT_EQ(lines[i], here[i].ToHex()) << "block " << i;
}

}  // namespace
}  // namespace kvtier
