// ClientTest's fixture: the SDK against a real embedded cluster (coordinator, worker and
// store in this process, over loopback RPC) with two tenants, an engine acting for both
// and a node credential in its token file.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <string>
#include <vector>

#include "services/cli/embedded_cluster.h"
#include "services/client/client.h"
#include "tests/testing/test_util.h"

namespace kvtier::client {

inline constexpr char kToken[] = "team-a-token-0123456789abcdef0123456789";
inline constexpr char kOtherToken[] = "team-b-token-0123456789abcdef0123456789";
inline constexpr char kEngineToken[] = "engine-token-0123456789abcdef0123456789";  // acts for both
inline constexpr char kNodeToken[] =
    "nodes-token-0123456789abcdef0123456789";  // the operator's view
inline constexpr uint32_t kTokensPerBlock = 4;

inline KvLayout TestLayout() {
  // 2 layers x 2 KV heads x 8 dims x 4 tokens x fp16 x K,V = 512-byte blocks.
  return KvLayout::Create({.num_layers = 2,
                           .num_kv_heads = 2,
                           .head_dim = 8,
                           .tokens_per_block = kTokensPerBlock,
                           .dtype = KvDtype::kFp16})
      .value();
}

inline std::vector<uint32_t> Prompt(uint32_t first, uint32_t count) {
  std::vector<uint32_t> tokens(count);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cli::EmbeddedClusterOptions options;
    options.config.data_dir = dir_.path();
    options.config.coordinator.listen = {"127.0.0.1:0"};
    // A pool of 4 blocks (the whole 2 KiB budget), host and disk tiers behind it.
    options.config.worker = {.num_layers = 2,
                             .num_kv_heads = 2,
                             .head_dim = 8,
                             .tokens_per_block = kTokensPerBlock,
                             .dtype = "fp16",
                             .pool_bytes = 2048,
                             .free_memory_fraction = 1.0};
    options.config.store = {.host_cache_bytes = 1 << 20, .disk_bytes = 1 << 20};
    // Two tenants, each with its own salt.
    options.tokens =
        auth::TokenStore::FromYaml(
            std::string("tenants:\n") + "  - {name: team-a, salt: salt-a, token: " + kToken +
                "}\n" + "  - {name: team-b, salt: salt-b, token: " + kOtherToken + "}\n" +
                "engines:\n  - {name: engine, tenants: [team-a, team-b], token: " + kEngineToken +
                "}\n" + "nodes:\n  - {name: ops, token: " + kNodeToken + "}\n",
            "test tokens")
            .value();
    options.registry = &registry_;
    options.node_id = "node";
    options.event_tick = std::chrono::milliseconds(10);
    cluster_ = cli::EmbeddedCluster::Create(std::move(options)).value();
  }

  // An engine acting for team-a: it may map the pool.
  ClientOptions Options(const char* tenant = "team-a") const {
    return {.address = cluster_->endpoints()[0], .token = kEngineToken, .act_for = tenant};
  }

  std::unique_ptr<Client> Connect() {
    auto client = Client::Connect(Options());
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(client).value() : nullptr;
  }

  // The node's pool (the test's layout) mapped into this process.
  static Result<MappedPool> MapPool(Client& client) {
    KVTIER_ASSIGN_OR_RETURN(PoolMapping mapping, client.AttachPool(0, TestLayout()));
    return MappedPool::Map(mapping);
  }

  // Waits up to 5 s for the coordinator to match `want` blocks of `keys`.
  LookupResult WaitForMatch(Client& client, const std::vector<BlockKey>& keys, uint32_t want) {
    LookupResult last;
    testing::WaitUntil([&] {
      auto result = client.Lookup(keys);
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok()) return true;  // no use waiting
      last = *result;
      return last.matched_blocks == want;
    });
    return last;
  }

  testing::TempDir dir_;
  MetricsRegistry registry_;
  std::unique_ptr<cli::EmbeddedCluster> cluster_;
};

}  // namespace kvtier::client
