#include "services/bench/chat_workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

namespace kvtier::bench {
namespace {

TEST(ChatWorkloadTest, IsDeterministicAndWellFormed) {
  const ChatWorkloadOptions options{.conversations = 200, .seed = 7};
  const std::vector<TraceRequest> a = GenerateChatWorkload(options);
  EXPECT_EQ(a.size(), GenerateChatWorkload(options).size());
  EXPECT_EQ(a.front().hash_ids, GenerateChatWorkload(options).front().hash_ids);
  ASSERT_GE(a.size(), 200u);  // at least one turn each
  ASSERT_LE(a.size(), 200u * options.max_turns);
  uint64_t previous_ms = 0;
  for (const TraceRequest& r : a) {
    EXPECT_GE(r.timestamp_ms, previous_ms) << "arrival order";
    previous_ms = r.timestamp_ms;
    EXPECT_EQ(r.hash_ids.size(),
              (r.input_length + kMooncakeTokensPerBlock - 1) / kMooncakeTokensPerBlock);
    EXPECT_GT(r.output_length, 0u);
  }
  const ChatWorkloadOptions other{.conversations = 200, .seed = 8};
  EXPECT_NE(a.front().hash_ids, GenerateChatWorkload(other).front().hash_ids);
}

TEST(ChatWorkloadTest, SharesSystemPromptsAndGrowsConversations) {
  const std::vector<TraceRequest> requests =
      GenerateChatWorkload({.conversations = 300, .system_prompts = 4});
  // Four system prompts: every request starts with one of four first blocks.
  std::set<uint64_t> first_blocks;
  for (const TraceRequest& r : requests) first_blocks.insert(r.hash_ids.front());
  EXPECT_EQ(first_blocks.size(), 4u);
  // A later turn extends an earlier prompt: its ids start with all but the last (partial)
  // block of some earlier request's ids, and it is longer.
  size_t extended = 0;
  std::set<std::vector<uint64_t>> full_prefixes;
  for (const TraceRequest& r : requests) {
    for (size_t n = r.hash_ids.size() - 1; n >= 3; --n) {
      if (full_prefixes.count(
              {r.hash_ids.begin(), r.hash_ids.begin() + static_cast<std::ptrdiff_t>(n)})) {
        ++extended;
        break;
      }
    }
    full_prefixes.insert({r.hash_ids.begin(), r.hash_ids.end() - 1});
  }
  EXPECT_GT(extended, requests.size() / 3) << "multi-turn conversations reuse their history";
  // The last block of a prompt is partial and never reappears at the same position.
  const TraceRequest& one = requests[0];
  for (const TraceRequest& r : requests) {
    if (&r == &one || r.hash_ids.size() < one.hash_ids.size()) continue;
    EXPECT_NE(r.hash_ids[one.hash_ids.size() - 1], one.hash_ids.back());
  }
}

// With a one-off share of a half, about half the conversations are one request whose 16
// blocks after the system prompt no other request has; the rest are as before.
TEST(ChatWorkloadTest, OneOffConversationsAreSingleRequestsOfUniqueBlocks) {
  const std::vector<TraceRequest> chat = GenerateChatWorkload({.conversations = 400});
  EXPECT_EQ(GenerateChatWorkload({.conversations = 400, .one_off_share = 0}).front().hash_ids,
            chat.front().hash_ids)
      << "no share: the default workload, unchanged";
  const std::vector<TraceRequest> mixed =
      GenerateChatWorkload({.conversations = 400, .one_off_share = 0.5});
  EXPECT_LT(mixed.size(), chat.size()) << "fewer turns in all";
  std::map<uint64_t, size_t> uses;  // block id -> requests holding it
  for (const TraceRequest& r : mixed) {
    for (uint64_t id : r.hash_ids) ++uses[id];
  }
  size_t one_offs = 0;
  for (const TraceRequest& r : mixed) {
    const auto seen_once = std::count_if(r.hash_ids.begin(), r.hash_ids.end(),
                                         [&](uint64_t id) { return uses[id] == 1; });
    if (seen_once >= 16) ++one_offs;
  }
  EXPECT_GT(one_offs, 150u);
  EXPECT_LT(one_offs, 250u);
}

}  // namespace
}  // namespace kvtier::bench
