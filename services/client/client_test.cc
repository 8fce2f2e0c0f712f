// The SDK against a real embedded cluster (coordinator, worker and store in this process,
// over loopback RPC): the calls an inference process makes, their errors and retries.
#include "services/client/client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <numeric>
#include <thread>

#include "services/client/testing/client_fixture.h"
#include "services/rpc/testing/recording_proxy.h"

namespace kvtier::client {
namespace {

using namespace std::chrono_literals;

TEST_F(ClientTest, ComputesLooksUpAllocatesCommitsAndReuses) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->tenant(), "team-a");
  // A prompt of 10 tokens: two full blocks (keys) and two tokens of a third.
  const std::vector<uint32_t> prompt = Prompt(100, 10);
  const std::vector<BlockKey> keys = Client::BlockKeys(prompt, kTokensPerBlock);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys, ComputeBlockKeys("", prompt, kTokensPerBlock));

  // Nothing cached yet.
  auto miss = client->Lookup(keys);
  ASSERT_TRUE(miss.ok()) << miss.status();
  EXPECT_EQ(miss->matched_blocks, 0u);

  // Sequence 1 computes both blocks and commits them.
  auto first = client->Allocate({.sequence = 1, .keys = keys, .num_tokens = 10});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->block_ids.size(), 3u);
  EXPECT_EQ(first->reused_blocks, 0u);
  auto committed = client->Commit(1, keys);
  ASSERT_TRUE(committed.ok()) << committed.status();
  EXPECT_EQ(*committed, 2u);

  // The coordinator learns both, at the worker's GPU tier, and routes there.
  const LookupResult hit = WaitForMatch(*client, keys, 2);
  ASSERT_EQ(hit.matched_blocks, 2u);
  ASSERT_EQ(hit.locations.size(), 2u);
  EXPECT_EQ(hit.locations[0].at(0).node_id, "node/worker");
  EXPECT_EQ(hit.locations[0].at(0).tier, Tier::kGpu);
  auto route = client->Route(keys);
  ASSERT_TRUE(route.ok()) << route.status();
  EXPECT_EQ(route->node_id, "node/worker");
  EXPECT_EQ(route->prefix_blocks, 2u);

  // Sequence 2 with the same prompt reuses blocks 0,1 in place.
  ASSERT_TRUE(client->Free(1).ok());
  auto second = client->Allocate({.sequence = 2, .keys = keys, .num_tokens = 10});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->reused_blocks, 2u);
  EXPECT_EQ(std::vector<uint32_t>(second->block_ids.begin(), second->block_ids.begin() + 2),
            std::vector<uint32_t>(first->block_ids.begin(), first->block_ids.begin() + 2));
  auto local = client->LookupLocal(0, keys);
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(*local, 2u);

  auto mapping = client->AttachPool(0, TestLayout());
  ASSERT_TRUE(mapping.ok()) << mapping.status();
  EXPECT_EQ(mapping->num_blocks, 4u);
  EXPECT_FALSE(mapping->shared_memory_name.empty());
  auto stats = client->GetWorkerStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->total_blocks, 4u);
  ASSERT_EQ(stats->pool_layouts.size(), 1u);
  EXPECT_EQ(stats->pool_layouts[0], TestLayout());
  EXPECT_EQ(stats->used_blocks, 0u) << "a tenant sees the pool's size, not how full it is";
  auto node = Client::Connect({.address = cluster_->endpoints()[0], .token = kNodeToken}).value();
  EXPECT_EQ(node->GetWorkerStats()->used_blocks, 3u);  // sequence 2's table
  EXPECT_EQ(client->GetCoordinatorStats()->index_blocks, 0u) << "nor what the index holds";
  auto index = node->GetCoordinatorStats();
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_GE(index->index_blocks, 2u);
  EXPECT_GE(index->lookups, 2u) << "the miss and the hit above";
  EXPECT_EQ(index->lease_expiries, 0u);
}

TEST_F(ClientTest, APromptEndingInsideACommittedBlockMatchesItPartially) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  // Sequence 1: tokens 100-107, two full blocks, committed with their tokens.
  const std::vector<uint32_t> conversation = Prompt(100, 8);
  const std::vector<BlockKey> keys = Client::BlockKeys(conversation, kTokensPerBlock);
  ASSERT_TRUE(client->Allocate({.sequence = 1, .keys = keys, .num_tokens = 8}).ok());
  ASSERT_TRUE(client->Commit(1, keys, {}, conversation).ok());
  ASSERT_EQ(WaitForMatch(*client, keys, 2).matched_blocks, 2u);

  // A prompt of tokens 100-106: block 0 whole, then 3 of block 1's 4 tokens.
  const std::vector<uint32_t> prompt = Prompt(100, 7);
  const std::vector<BlockKey> prompt_keys = Client::BlockKeys(prompt, kTokensPerBlock);
  const auto tail = std::span(prompt).subspan(prompt_keys.size() * kTokensPerBlock);
  auto r = client->Lookup(prompt_keys, tail);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->matched_blocks, 1u);
  EXPECT_EQ(r->partial_match_tokens, 3u);
  EXPECT_EQ(r->partial_block_tokens, kTokensPerBlock);
  EXPECT_EQ(r->partial_block_key, BlockKey{})
      << "a key of the tenant's key space, which no client sees";
  ASSERT_EQ(r->partial_block_locations.size(), 1u);
  EXPECT_EQ(r->partial_block_locations[0].node_id, "node/worker");
  ASSERT_FALSE(r->scores.empty());
  EXPECT_EQ(r->scores[0].node_id, "node/worker");
  EXPECT_EQ(r->scores[0].partial_tokens, 3u);
  EXPECT_DOUBLE_EQ(r->scores[0].score, 1.75);

  // Another tenant's lookup of the same tokens matches nothing, partially or not.
  auto other = Client::Connect({.address = cluster_->endpoints()[0], .token = kOtherToken});
  ASSERT_TRUE(other.ok()) << other.status();
  auto theirs = (*other)->Lookup(prompt_keys, tail);
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  EXPECT_EQ(theirs->matched_blocks, 0u);
  EXPECT_EQ(theirs->partial_match_tokens, 0u);
  EXPECT_TRUE(theirs->scores.empty());
}

TEST_F(ClientTest, BytesWrittenInTheMappedPoolComeBackThroughTheHostTier) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto pool = MapPool(*client);
  ASSERT_TRUE(pool.ok()) << pool.status();
  // Sequence 1 computes blocks 0,1 of a prompt into the pool, in place, and commits them.
  const std::vector<BlockKey> keys = Client::BlockKeys(Prompt(7, 8), kTokensPerBlock);
  auto first = client->Allocate({.sequence = 1, .keys = keys, .num_tokens = 8});
  ASSERT_TRUE(first.ok()) << first.status();
  for (uint32_t b = 0; b < 2; ++b) {
    std::span<uint8_t> block = pool->block(first->block_ids[b]);
    for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<uint8_t>(i * 7 + b);
  }
  ASSERT_TRUE(client->Commit(1, keys).ok());
  ASSERT_TRUE(client->Free(1).ok());
  // Sequence 2 needs the whole pool: blocks 0,1 are offloaded to the host tier and their
  // pool blocks zeroed by the new owner.
  auto other = client->Allocate({.sequence = 2,
                                 .keys = Client::BlockKeys(Prompt(900, 16), kTokensPerBlock),
                                 .num_tokens = 16});
  ASSERT_TRUE(other.ok()) << other.status();
  for (uint32_t id : other->block_ids) std::fill(pool->block(id).begin(), pool->block(id).end(), 0);
  ASSERT_TRUE(client->Free(2).ok());
  // Sequence 3 starts with the same prompt: nothing in the pool, both blocks onboarded
  // from the host tier with the bytes sequence 1 wrote.
  auto third = client->Allocate({.sequence = 3, .keys = keys, .num_tokens = 8});
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->reused_blocks, 0u);
  auto onboarded = client->Onboard(3, keys);
  ASSERT_TRUE(onboarded.ok()) << onboarded.status();
  EXPECT_EQ(onboarded->from_host, 2u);
  for (uint32_t b = 0; b < 2; ++b) {
    std::span<uint8_t> block = pool->block(third->block_ids[b]);
    for (size_t i = 0; i < block.size(); ++i)
      ASSERT_EQ(block[i], static_cast<uint8_t>(i * 7 + b)) << b << " " << i;
  }
}

// A static sequence (reserve_tokens) holds its whole table from Allocate: decoding into
// it through the mapped pool never moves a block, while other sequences come and go.
TEST_F(ClientTest, AStaticSequencesBlocksNeverMoveAsItDecodes) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto pool = MapPool(*client);
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto fixed = client->Allocate({.sequence = 1, .num_tokens = 2, .reserve_tokens = 12});
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  ASSERT_EQ(fixed->block_ids.size(), 3u) << "12 tokens of 4 a block, of a 4-block pool";
  for (uint32_t b = 0; b < 3; ++b) {
    std::span<uint8_t> block = pool->block(fixed->block_ids[b]);
    std::fill(block.begin(), block.end(), static_cast<uint8_t>(0xA0 + b));
  }
  for (uint32_t tokens = 3; tokens <= 12; ++tokens) {
    // Another sequence takes the one block left and gives it back, every step.
    auto other =
        client->Allocate({.sequence = 100 + tokens,
                          .keys = Client::BlockKeys(Prompt(tokens * 50, 4), kTokensPerBlock),
                          .num_tokens = 4});
    ASSERT_TRUE(other.ok()) << other.status();
    ASSERT_TRUE(client->Free(100 + tokens).ok());
    auto grown = client->Extend(1, tokens);
    ASSERT_TRUE(grown.ok()) << grown.status();
    ASSERT_EQ(grown->block_ids, fixed->block_ids) << "at " << tokens << " tokens";
  }
  for (uint32_t b = 0; b < 3; ++b) {
    for (uint8_t byte : pool->block(fixed->block_ids[b])) ASSERT_EQ(byte, 0xA0 + b);
  }
  const Result<Allocation> past = client->Extend(1, 13);
  EXPECT_EQ(past.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(past.status().message().find("reserved 12 tokens"), std::string::npos) << past.status();
  // A dynamic sequence grows its table instead: a new block at token 5.
  ASSERT_TRUE(client->Free(1).ok());
  auto dynamic = client->Allocate({.sequence = 2, .num_tokens = 3});
  ASSERT_TRUE(dynamic.ok()) << dynamic.status();
  auto longer = client->Extend(2, 5);
  ASSERT_TRUE(longer.ok()) << longer.status();
  EXPECT_EQ(longer->block_ids.size(), 2u);
  EXPECT_EQ(longer->block_ids[0], dynamic->block_ids[0]);
}

TEST_F(ClientTest, AsyncCallsFromManyThreads) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  // Four threads each run one sequence of one block, sequence ids 1..4 (the pool's size).
  std::vector<std::thread> threads;
  std::atomic<int> committed{0};
  for (uint64_t t = 1; t <= 4; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<BlockKey> keys =
          Client::BlockKeys(Prompt(1000 * static_cast<uint32_t>(t), 4), kTokensPerBlock);
      auto allocation = client->AllocateAsync({.sequence = t, .keys = keys, .num_tokens = 4});
      auto lookup = client->LookupAsync(keys);
      ASSERT_TRUE(allocation.get().ok());
      ASSERT_TRUE(lookup.get().ok());
      auto commit = client->CommitAsync(t, keys).get();
      ASSERT_TRUE(commit.ok()) << commit.status();
      committed += static_cast<int>(*commit);
      ASSERT_TRUE(client->FreeAsync(t).get().ok());
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(committed.load(), 4);
}

// The SDK holds each answer until its connection's next call is sent, so that the
// answer's Finish rides behind that Call (services/rpc/deferred_finish.h). A proxy in
// front of the node logs what the client sends: worker stats twice, then a lookup (the
// coordinator's call, on the same connection), then worker stats again.
TEST_F(ClientTest, EachAnswersFinishFollowsTheNextCallOnTheWire) {
  auto proxy = rpc::testing::RecordingProxy::Start(cluster_->endpoints()[0]);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  ClientOptions options = Options();
  options.address = (*proxy)->address();
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  const std::vector<BlockKey> keys = Client::BlockKeys(Prompt(1, 8), kTokensPerBlock);
  ASSERT_TRUE((*client)->GetWorkerStats().ok());
  ASSERT_TRUE((*client)->GetWorkerStats().ok());
  ASSERT_TRUE((*client)->Lookup(keys).ok());
  ASSERT_TRUE((*client)->GetWorkerStats().ok());

  // Each of the first three calls' Finish comes after the Call that followed it.
  using Kind = rpc::testing::WireMessage::Kind;
  const std::vector<rpc::testing::WireMessage> log = (*proxy)->Log();
  std::vector<size_t> calls;  // where the four calls are in the log
  for (size_t i = 0; i < log.size(); ++i) {
    if (log[i].kind == Kind::kCall &&
        (log[i].method == "Worker.stats" || log[i].method == "Coordinator.lookup")) {
      calls.push_back(i);
    }
  }
  const std::string sent = ::testing::PrintToString(log.size()) + " messages";
  ASSERT_EQ(calls.size(), 4u) << sent;
  EXPECT_EQ(log[calls[2]].method, "Coordinator.lookup");
  for (size_t k = 0; k + 1 < calls.size(); ++k) {
    const uint32_t question = log[calls[k]].question;
    size_t finish = calls[k] + 1;
    while (finish < log.size() &&
           !(log[finish].kind == Kind::kFinish && log[finish].question == question))
      ++finish;
    EXPECT_GT(finish, calls[k + 1])
        << "call " << k << "'s Finish is sent after call " << k + 1 << " (" << sent << ")";
  }
}

TEST_F(ClientTest, ErrorsNameWhatWasWrong) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  KvLayout other = KvLayout::Create({.num_layers = 3,
                                     .num_kv_heads = 2,
                                     .head_dim = 8,
                                     .tokens_per_block = kTokensPerBlock,
                                     .dtype = KvDtype::kFp16})
                       .value();
  auto attached = client->AttachPool(0, other);
  EXPECT_EQ(attached.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(attached.status().message().find("num_layers"), std::string::npos) << attached.status();
  EXPECT_EQ(client->Extend(77, 8).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client->Free(77).code(), StatusCode::kNotFound);

  // A retention of 200 years is past the 100 the worker keeps (an engine wanting no
  // expiry leaves the duration out): refused by name, nothing committed.
  const std::vector<BlockKey> keys = Client::BlockKeys(Prompt(900, 8), kTokensPerBlock);
  ASSERT_TRUE(client->Allocate({.sequence = 5, .keys = keys, .num_tokens = 8}).ok());
  RetentionConfig centuries;
  centuries.ranges.push_back(
      {.first_token = 0, .priority = 90, .duration = std::chrono::hours(24 * 365 * 200)});
  const auto committed = client->Commit(5, keys, centuries);
  EXPECT_EQ(committed.status().code(), StatusCode::kInvalidArgument) << committed.status();
  EXPECT_NE(
      committed.status().message().find("retention range 0's duration of 6307200000000 ms exceeds"),
      std::string::npos)
      << committed.status();
  EXPECT_EQ(client->Commit(5, keys).value(), 2u)
      << "the same blocks commit with a retention in range";
  ASSERT_TRUE(client->Free(5).ok());

  auto bad_token = Client::Connect({.address = cluster_->endpoints()[0], .token = "wrong"});
  EXPECT_EQ(bad_token.status().code(), StatusCode::kUnauthenticated) << bad_token.status();
  auto bad_address = Client::Connect({.address = "no-port-here", .token = kToken});
  EXPECT_FALSE(bad_address.ok());
}

TEST_F(ClientTest, AFullPoolIsRetriedUntilRoomIsMade) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  // Sequence 1 holds all four blocks.
  const std::vector<BlockKey> keys = Client::BlockKeys(Prompt(0, 16), kTokensPerBlock);
  ASSERT_TRUE(client->Allocate({.sequence = 1, .keys = keys, .num_tokens = 16}).ok());
  // Sequence 2 is refused (kResourceExhausted), retried after the backoff, by which time
  // the Free sent after it has made room.
  const std::vector<BlockKey> other = Client::BlockKeys(Prompt(500, 8), kTokensPerBlock);
  auto waiting = client->AllocateAsync({.sequence = 2, .keys = other, .num_tokens = 8});
  ASSERT_TRUE(client->Free(1).ok());
  auto allocated = waiting.get();
  ASSERT_TRUE(allocated.ok()) << allocated.status();
  EXPECT_EQ(allocated->block_ids.size(), 2u);

  // With a single attempt the refusal comes back as it is.
  ClientOptions once = Options();
  once.max_attempts = 1;
  auto single = Client::Connect(once).value();
  auto refused = single->Allocate({.sequence = 3, .keys = keys, .num_tokens = 16});
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status();
}

TEST(ClientConnectTest, AServerThatNeverAnswersTimesOut) {
  // A listening socket nobody serves: the connection opens, authentication never returns.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string endpoint = "127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  auto client = Client::Connect({.address = endpoint, .token = "t", .timeout = 200ms});
  EXPECT_EQ(client.status().code(), StatusCode::kDeadlineExceeded) << client.status();
  close(fd);
}

}  // namespace
}  // namespace kvtier::client
