#include "services/auth/token_store.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace kvtier::auth {
namespace {

const std::string kTokenA(40, 'a');
const std::string kTokenB(40, 'b');

std::string TwoTenants() {
  return "tenants:\n"
         "  - {name: team-a, token: " +
         kTokenA +
         ", salt: salt-a}\n"
         "  - {name: team-b, token: " +
         kTokenB + "}\n";
}

TEST(TokenStoreTest, EachTokenMapsToItsTenantAndSalt) {
  Result<TokenStore> store = TokenStore::FromYaml(TwoTenants(), "tokens.yaml");
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(store->tenant_count(), 2u);
  Result<Tenant> a = store->Authenticate(kTokenA);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->name, "team-a");
  EXPECT_EQ(a->salt, "salt-a");
  Result<Tenant> b = store->Authenticate(kTokenB);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->salt, "team-b") << "the salt defaults to the tenant name";
}

TEST(TokenStoreTest, NodeCredentialsAreNodesWithoutASalt) {
  const std::string node_token(40, 'n');
  Result<TokenStore> store = TokenStore::FromYaml(
      TwoTenants() + "nodes:\n  - {name: cluster-nodes, token: " + node_token + "}\n",
      "tokens.yaml");
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(store->tenant_count(), 2u);
  EXPECT_EQ(store->node_count(), 1u);
  Result<Tenant> node = store->Authenticate(node_token);
  ASSERT_TRUE(node.ok());
  EXPECT_TRUE(node->node);
  EXPECT_EQ(node->name, "cluster-nodes");
  EXPECT_EQ(node->salt, "") << "a node has no salt of its own";
  EXPECT_FALSE(store->Authenticate(kTokenA)->node) << "a tenant token is no node credential";
  EXPECT_TRUE(TokenStore::Disabled().Authenticate("anything")->node)
      << "auth off: every process is trusted";
}

TEST(TokenStoreTest, MalformedNodeEntriesNameTheEntryAndField) {
  auto error = [](const std::string& nodes) {
    return TokenStore::FromYaml(TwoTenants() + nodes, "tokens.yaml").status().message();
  };
  EXPECT_NE(error("nodes:\n  - {name: n, token: " + kTokenA + "}\n")
                .find("nodes[0].token: the same token is given to tenant \"team-a\""),
            std::string::npos);
  EXPECT_NE(error("nodes:\n  - {name: team-a, token: " + std::string(40, 'n') + "}\n")
                .find("nodes[0].name: \"team-a\" appears twice"),
            std::string::npos);
  EXPECT_NE(error("nodes:\n  - {name: n, token: " + std::string(40, 'n') + ", salt: s}\n")
                .find("nodes[0]: unknown field \"salt\""),
            std::string::npos);
  EXPECT_NE(error("nodes: {name: n}\n").find("\"nodes\" must be a list"), std::string::npos);
  EXPECT_NE(error("admins: []\n").find("unknown section \"admins\""), std::string::npos);
}

// An engine acts for the tenants it names, with their salts and the right to map pools;
// no other credential acts for anyone but itself.
TEST(TokenStoreTest, AnEngineActsForItsTenantsOnly) {
  const std::string engine(40, 'e'), node(40, 'n');
  Result<TokenStore> store =
      TokenStore::FromYaml(TwoTenants() + "engines:\n  - {name: vllm, token: " + engine +
                               ", tenants: [team-a]}\nnodes:\n  - {name: n, token: " + node + "}\n",
                           "tokens.yaml");
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(store->engine_count(), 1u);
  EXPECT_EQ(store->tenant_count(), 2u);
  Result<Tenant> acting = store->Authenticate(engine, "team-a");
  ASSERT_TRUE(acting.ok()) << acting.status();
  EXPECT_EQ(acting->name, "team-a");
  EXPECT_EQ(acting->salt, "salt-a");
  EXPECT_TRUE(acting->maps_pools);
  EXPECT_FALSE(acting->node);
  EXPECT_EQ(store->Authenticate(engine, "team-b").status().code(), StatusCode::kPermissionDenied);
  const Status none = store->Authenticate(engine).status();
  EXPECT_EQ(none.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.message().find("name one of its tenants"), std::string::npos) << none;
  EXPECT_FALSE(store->Authenticate(kTokenA)->maps_pools) << "a tenant token never maps pool memory";
  EXPECT_TRUE(store->Authenticate(kTokenA, "team-a").ok()) << "a token may name its own tenant";
  EXPECT_EQ(store->Authenticate(kTokenA, "team-b").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(store->Authenticate(node, "team-a").status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(store->Authenticate(node)->maps_pools);
  EXPECT_EQ(store->Authenticate(std::string(40, 'x'), "team-a").status().code(),
            StatusCode::kUnauthenticated);
}

// An engine's session derives its other tenants' sessions with the engine's rights, as
// authenticating again would; nobody else derives any.
TEST(TokenStoreTest, AnEnginesSessionActsForItsOtherTenants) {
  const std::string path = ::testing::TempDir() + "/act-for-tokens.yaml";
  const std::string engine(40, 'e'), node(40, 'n');
  const auto write = [&](const std::string& engine_tenants) {
    std::ofstream(path, std::ios::trunc)
        << TwoTenants() + "  - {name: team-c, token: " + std::string(40, 'c') +
               ", salt: salt-c}\nengines:\n  - {name: vllm, token: " + engine + ", tenants: [" +
               engine_tenants + "]}\nnodes:\n  - {name: n, token: " + node + "}\n";
  };
  write("team-a, team-b");
  Result<TokenStore> store = TokenStore::FromFile(path);
  ASSERT_TRUE(store.ok()) << store.status();
  const Tenant for_a = *store->Authenticate(engine, "team-a");

  Result<Tenant> for_b = store->ActFor(for_a, "team-b");
  ASSERT_TRUE(for_b.ok()) << for_b.status();
  EXPECT_EQ(for_b->name, "team-b");
  EXPECT_EQ(for_b->salt, "team-b") << "team-b's own salt (its name), not team-a's";
  EXPECT_TRUE(for_b->maps_pools);
  EXPECT_FALSE(for_b->node);
  EXPECT_TRUE(store->StillGrants(*for_b).ok());
  EXPECT_EQ(store->ActFor(*for_b, "team-a")->salt, "salt-a") << "and back";

  const Status not_its = store->ActFor(for_a, "team-c").status();
  EXPECT_EQ(not_its.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(not_its.message().find("engine \"vllm\" may not act for tenant \"team-c\""),
            std::string::npos)
      << not_its;
  const Status tenant = store->ActFor(*store->Authenticate(kTokenA), "team-b").status();
  EXPECT_EQ(tenant.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(tenant.message().find("\"team-a\" may not act for tenant \"team-b\""),
            std::string::npos)
      << tenant;
  EXPECT_EQ(store->ActFor(*store->Authenticate(kTokenA), "team-a").status().code(),
            StatusCode::kPermissionDenied)
      << "a tenant's session derives nothing, not even its own";
  EXPECT_EQ(store->ActFor(*store->Authenticate(node), "team-a").status().code(),
            StatusCode::kPermissionDenied);

  write("team-a");  // the engine no longer serves team-b
  ASSERT_TRUE(store->Reload().ok());
  EXPECT_EQ(store->StillGrants(*for_b).code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(store->ActFor(for_a, "team-b").status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(store->ActFor(for_a, "team-a").ok());
  std::remove(path.c_str());

  EXPECT_EQ(TokenStore::Disabled().ActFor(Tenant{"default", ""}, "anyone")->name, "default")
      << "auth off: every tenant is the one local user";
}

TEST(TokenStoreTest, MalformedEngineEntriesNameTheEntryAndField) {
  auto error = [](const std::string& engines) {
    return TokenStore::FromYaml(TwoTenants() + engines, "tokens.yaml").status().message();
  };
  const std::string token(40, 'e');
  EXPECT_NE(error("engines:\n  - {name: e, token: " + token + "}\n")
                .find("engines[0].tenants: expects a non-empty list"),
            std::string::npos);
  EXPECT_NE(error("engines:\n  - {name: e, token: " + token + ", tenants: [team-c]}\n")
                .find("engine \"e\" acts for \"team-c\", which is not a tenant of this file"),
            std::string::npos);
  EXPECT_NE(error("engines:\n  - {name: e, token: " + token + ", tenants: [team-a], salt: s}\n")
                .find("engines[0]: unknown field \"salt\" (known: name, token, tenants)"),
            std::string::npos);
  EXPECT_NE(error("engines:\n  - {name: e, token: " + kTokenB + ", tenants: [team-a]}\n")
                .find("engines[0].token: the same token is given to tenant \"team-b\""),
            std::string::npos);
}

// A reload takes the file as it is now: sessions of tokens it dropped, moved or no longer
// lets act are not granted any more, others are; a file that does not parse changes
// nothing; copies see the reload.
TEST(TokenStoreTest, AReloadRevokesWhatTheFileNoLongerGrants) {
  const std::string path = ::testing::TempDir() + "/reload-tokens.yaml";
  const std::string engine(40, 'e');
  const auto write = [&](const std::string& text) { std::ofstream(path, std::ios::trunc) << text; };
  write(TwoTenants() + "engines:\n  - {name: vllm, token: " + engine +
        ", tenants: [team-a, team-b]}\n");
  Result<TokenStore> store = TokenStore::FromFile(path);
  ASSERT_TRUE(store.ok()) << store.status();
  const TokenStore copy = *store;
  const Tenant a = *store->Authenticate(kTokenA), b = *store->Authenticate(kTokenB);
  const Tenant engine_for_b = *store->Authenticate(engine, "team-b");
  EXPECT_TRUE(store->StillGrants(b).ok());
  const uint64_t before = store->generation();

  write("tenants:\n  - {name: team-a, token: " + kTokenA +
        ", salt: salt-a}\n  - {name: team-c, token: " + kTokenB +
        "}\nengines:\n  - {name: vllm, token: " + engine + ", tenants: [team-a]}\n");
  ASSERT_TRUE(store->Reload().ok());
  EXPECT_GT(copy.generation(), before) << "copies share the entries";
  EXPECT_TRUE(copy.StillGrants(a).ok());
  const Status moved = copy.StillGrants(b);
  EXPECT_EQ(moved.code(), StatusCode::kUnauthenticated) << "team-b's token now opens team-c";
  EXPECT_NE(moved.message().find("tenant \"team-b\""), std::string::npos) << moved;
  EXPECT_EQ(copy.StillGrants(engine_for_b).code(), StatusCode::kUnauthenticated)
      << "vllm acts for team-a only";
  EXPECT_EQ(copy.Authenticate(kTokenB)->name, "team-c");

  write("tenants: [");
  const Status bad = store->Reload();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find(path), std::string::npos) << bad;
  EXPECT_TRUE(store->StillGrants(a).ok()) << "a file that does not parse changes nothing";
  EXPECT_EQ(TokenStore::FromYaml(TwoTenants(), "x")->Reload().code(),
            StatusCode::kFailedPrecondition);
  std::remove(path.c_str());
}

TEST(TokenStoreTest, WrongTokenIsUnauthenticatedAndNotEchoed) {
  const TokenStore store = *TokenStore::FromYaml(TwoTenants(), "tokens.yaml");
  const std::string wrong(40, 'c');
  Result<Tenant> result = store.Authenticate(wrong);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(result.status().message().find(wrong), std::string::npos);
  EXPECT_FALSE(store.Authenticate("").ok());
}

TEST(TokenStoreTest, MalformedFilesNameTheEntryAndField) {
  auto error = [](const std::string& yaml) {
    return TokenStore::FromYaml(yaml, "tokens.yaml").status();
  };
  EXPECT_NE(error("tenants: [\n").message().find("invalid YAML"), std::string::npos);
  EXPECT_NE(error("users: []\n").message().find("\"tenants\""), std::string::npos);
  EXPECT_NE(error("tenants:\n  - {name: Team_A, token: " + kTokenA + "}\n")
                .message()
                .find("tenants[0].name"),
            std::string::npos);
  EXPECT_NE(error("tenants:\n  - {name: a, token: short}\n")
                .message()
                .find("tenants[0].token: must be at least 32"),
            std::string::npos);
  EXPECT_NE(error("tenants:\n  - {name: a, token: " + kTokenA + ", role: admin}\n")
                .message()
                .find("unknown field \"role\""),
            std::string::npos);
  EXPECT_NE(error("tenants:\n  - {name: a, token: " + kTokenA +
                  "}\n  - {name: a, token: " + kTokenB + "}\n")
                .message()
                .find("tenants[1].name: \"a\" appears twice"),
            std::string::npos);
  EXPECT_NE(error("tenants:\n  - {name: a, token: " + kTokenA +
                  "}\n  - {name: b, token: " + kTokenA + "}\n")
                .message()
                .find("same token"),
            std::string::npos);
  // A list used as a key, in an entry and at the top: refused by name (it once escaped as
  // yaml-cpp's conversion exception, found by token_file_fuzz).
  EXPECT_NE(error("tenants:\n  - {name: a, token: " + kTokenA + ", [role]: admin}\n")
                .message()
                .find("tenants[0]: a key must be a plain name; this one is a list"),
            std::string::npos);
  EXPECT_NE(error("tenants:\n  - {name: a, token: " + kTokenA + "}\n? [nodes]\n: []\n")
                .message()
                .find("tokens.yaml: a key must be a plain name; this one is a list"),
            std::string::npos);
  EXPECT_NE(error("tenants:\n  - {name: a, token: " + kTokenA + ", ~: admin}\n")
                .message()
                .find("tenants[0]: a key must be a plain name; this one is empty"),
            std::string::npos);
  EXPECT_NE(
      TokenStore::FromFile("/nonexistent/tokens.yaml").status().message().find("cannot be read"),
      std::string::npos);
}

TEST(TokenStoreTest, DisabledAcceptsAnyTokenAsDefaultTenant) {
  const TokenStore store = TokenStore::Disabled();
  EXPECT_FALSE(store.enabled());
  Result<Tenant> t = store.Authenticate("anything");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->name, "default");
  EXPECT_EQ(t->salt, "");
}

TEST(TokenStoreTest, GeneratedTokensAreLongAndDistinct) {
  const std::string a = GenerateToken();
  const std::string b = GenerateToken();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  Result<TokenStore> store = TokenStore::SingleTenant({"default", ""}, a);
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE(store->Authenticate(a).ok());
  EXPECT_FALSE(store->Authenticate(b).ok());
}

TEST(TokenStoreTest, ATokenFileIsReadByItsFirstLine) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/token_store_test_token";
  {
    std::ofstream out(path);
    out << kTokenA << "\nsecond line\n";
  }
  auto token = ReadTokenFile(path);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, kTokenA);
  std::ofstream(path, std::ios::trunc).close();
  EXPECT_EQ(ReadTokenFile(path).status().code(), StatusCode::kNotFound) << "an empty file";
  std::remove(path.c_str());
  auto missing = ReadTokenFile(path);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path), std::string::npos) << missing.status();
}

// A command's --token wins over its --token-file, which is read only when needed; with
// neither the token is empty (auth off).
TEST(TokenStoreTest, TokenFromFlagsPrefersTheTokenToTheFile) {
  const std::string path = ::testing::TempDir() + "/token_store_test_flags";
  {
    std::ofstream out(path);
    out << kTokenA << "\n";
  }
  EXPECT_EQ(*TokenFromFlags("given", path), "given");
  EXPECT_EQ(*TokenFromFlags("", path), kTokenA);
  EXPECT_EQ(*TokenFromFlags("", ""), "");
  std::remove(path.c_str());
  EXPECT_EQ(TokenFromFlags("", path).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*TokenFromFlags("given", path), "given")
      << "the file is not read when a token is given";
}

}  // namespace
}  // namespace kvtier::auth
