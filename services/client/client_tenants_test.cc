// The SDK's tenants against a real embedded cluster: another tenant's blocks never match,
// and an engine picks each request's tenant over one connection (Client::ForTenant).
#include <gtest/gtest.h>

#include "services/client/client.h"
#include "services/client/testing/client_fixture.h"

namespace kvtier::client {
namespace {

TEST_F(ClientTest, AnotherTenantsBlocksNeverMatch) {
  auto a = Connect();
  ASSERT_NE(a, nullptr);
  auto b = Client::Connect(Options("team-b")).value();
  EXPECT_EQ(b->tenant(), "team-b");
  // Team a computes and commits blocks 0,1 of a prompt.
  const std::vector<BlockKey> keys = Client::BlockKeys(Prompt(0, 8), kTokensPerBlock);
  ASSERT_TRUE(a->Allocate({.sequence = 1, .keys = keys, .num_tokens = 8}).ok());
  ASSERT_TRUE(a->Commit(1, keys).ok());
  ASSERT_EQ(WaitForMatch(*a, keys, 2).matched_blocks, 2u);
  // Team b, same tokens and so the same keys: no match, no score, no reuse in the pool.
  auto seen_by_b = b->Lookup(keys);
  ASSERT_TRUE(seen_by_b.ok()) << seen_by_b.status();
  EXPECT_EQ(seen_by_b->matched_blocks, 0u);
  for (const NodeScore& score : seen_by_b->scores)
    EXPECT_EQ(score.prefix_blocks, 0u) << score.node_id;
  auto b_alloc = b->Allocate({.sequence = 1, .keys = keys, .num_tokens = 8});
  ASSERT_TRUE(b_alloc.ok()) << b_alloc.status();
  EXPECT_EQ(b_alloc->reused_blocks, 0u);
  // B caches its own copy, as if A had never sent the prompt, and reuses it after.
  auto b_cached = b->Commit(1, keys);
  ASSERT_TRUE(b_cached.ok()) << b_cached.status();
  EXPECT_EQ(*b_cached, 2u) << "the count tells B nothing of A's blocks";
  ASSERT_TRUE(b->Free(1).ok());
  auto b_again = b->Allocate({.sequence = 2, .keys = keys, .num_tokens = 8});
  ASSERT_TRUE(b_again.ok()) << b_again.status();
  EXPECT_EQ(b_again->reused_blocks, 2u);
  EXPECT_EQ(WaitForMatch(*b, keys, 2).matched_blocks, 2u);
}

// One engine connection serves both of its tenants, each request under the view it is
// made through: team-b's view gets the answers a cluster where team-a never ran gives.
TEST_F(ClientTest, AnEnginePicksEachRequestsTenantOverOneConnection) {
  auto engine = Connect();  // acting for team-a
  ASSERT_NE(engine, nullptr);
  Result<std::unique_ptr<Client>> view = engine->ForTenant("team-b");
  ASSERT_TRUE(view.ok()) << view.status();
  Client& b = **view;
  EXPECT_EQ(b.tenant(), "team-b");
  const std::vector<BlockKey> keys = Client::BlockKeys(Prompt(0, 8), kTokensPerBlock);
  ASSERT_TRUE(engine->Allocate({.sequence = 1, .keys = keys, .num_tokens = 8}).ok());
  ASSERT_TRUE(engine->Commit(1, keys).ok());
  ASSERT_EQ(WaitForMatch(*engine, keys, 2).matched_blocks, 2u);

  auto seen_by_b = b.Lookup(keys);
  ASSERT_TRUE(seen_by_b.ok()) << seen_by_b.status();
  EXPECT_EQ(seen_by_b->matched_blocks, 0u);
  for (const NodeScore& score : seen_by_b->scores)
    EXPECT_EQ(score.prefix_blocks, 0u) << score.node_id;
  EXPECT_EQ(b.LookupLocal(0, keys).value_or(99), 0u);
  // Sequence 1 again: the view's sequences are its own, beside the engine's.
  auto b_alloc = b.Allocate({.sequence = 1, .keys = keys, .num_tokens = 8});
  ASSERT_TRUE(b_alloc.ok()) << b_alloc.status();
  EXPECT_EQ(b_alloc->reused_blocks, 0u);
  auto b_cached = b.Commit(1, keys);
  ASSERT_TRUE(b_cached.ok()) << b_cached.status();
  EXPECT_EQ(*b_cached, 2u) << "the count tells team-b nothing of team-a's blocks";
  ASSERT_TRUE(b.Free(1).ok());
  EXPECT_EQ(WaitForMatch(b, keys, 2).matched_blocks, 2u);
  // The engine's own sequence 1 is untouched by the view's Free, and the view's blocks are
  // not the engine's: both tenants now hold the prompt, each in its own key space.
  EXPECT_EQ(engine->Extend(1, 8).status().code(), StatusCode::kOk);
  EXPECT_EQ(engine->LookupLocal(0, keys).value_or(99), 2u);

  // A view may outlive the client it came from, and reuses its tenant's blocks.
  engine.reset();
  auto b_again = b.Allocate({.sequence = 2, .keys = keys, .num_tokens = 8});
  ASSERT_TRUE(b_again.ok()) << b_again.status();
  EXPECT_EQ(b_again->reused_blocks, 2u);
}

TEST_F(ClientTest, OnlyAnEngineActsForItsOwnTenants) {
  auto engine = Connect();
  ASSERT_NE(engine, nullptr);
  auto tenant = Client::Connect({.address = cluster_->endpoints()[0], .token = kToken}).value();
  for (const char* name : {"team-b", "team-a"}) {
    const Status refused = tenant->ForTenant(name).status();
    EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused;
    EXPECT_NE(refused.message().find("only an engine credential acts for another tenant"),
              std::string::npos)
        << refused;
  }
  const Status unknown = engine->ForTenant("team-c").status();
  EXPECT_EQ(unknown.code(), StatusCode::kPermissionDenied) << unknown;
  EXPECT_NE(unknown.message().find("may not act for tenant \"team-c\""), std::string::npos)
      << unknown;
  auto node = Client::Connect({.address = cluster_->endpoints()[0], .token = kNodeToken}).value();
  EXPECT_EQ(node->ForTenant("team-a").status().code(), StatusCode::kPermissionDenied);
  // A refused view leaves the connection working.
  EXPECT_TRUE(engine->GetWorkerStats().ok());
  EXPECT_TRUE(tenant->Lookup(Client::BlockKeys(Prompt(0, 8), kTokensPerBlock)).ok());
}

}  // namespace
}  // namespace kvtier::client
