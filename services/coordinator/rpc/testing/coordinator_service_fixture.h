// The Coordinator service tests' fixture: a coordinator node on loopback with two
// tenants, an engine and a node credential, and a client per tenant. Test-only.
#pragma once

#include <capnp/ez-rpc.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/block_key.h"
#include "services/coordinator/rpc/coordinator_node.h"
#include "services/coordinator/rpc/node_agent.h"
#include "services/coordinator/rpc/node_link.h"
#include "services/rpc/schema/kvtier.capnp.h"
#include "services/rpc/schema_convert.h"
#include "services/rpc/status_mapping.h"
#include "tests/testing/test_util.h"

namespace kvtier::coordinator::service_test {

namespace schema = kvtier::rpc::schema;
inline const std::string kTokenA(40, 'a');
inline const std::string kTokenB(40, 'b');
inline const std::string kNodeToken(40, 'n');
inline const std::string kEngineToken(40, 'e');  // an engine acting for team-a

// One client connection (its own KJ event loop) holding a tenant's Coordinator capability.
class CoordinatorClient {
 public:
  CoordinatorClient(const std::string& address, const std::string& token,
                    const std::string& act_for = "")
      : client_(address), coordinator_(Connect(token, act_for)) {}

  template <typename Request>
  Status Send(Request request) {
    Status status;
    request.send()
        .then([](auto) {}, [&](kj::Exception&& e) { status = rpc::ExceptionToStatus(e); })
        .wait(ws());
    return status;
  }
  kj::WaitScope& ws() { return client_.getWaitScope(); }
  schema::Coordinator::Client& coordinator() { return coordinator_; }

 private:
  schema::Coordinator::Client Connect(const std::string& token, const std::string& act_for) {
    auto auth = client_.getMain<schema::Bootstrap>().authenticateRequest();
    auth.setToken(token);
    auth.setActFor(act_for);
    auto session = auth.send().wait(client_.getWaitScope()).getSession();
    return session.coordinatorRequest().send().wait(client_.getWaitScope()).getCoordinator();
  }
  capnp::EzRpcClient client_;
  schema::Coordinator::Client coordinator_;
};

// Keys `first`.. as a tenant sends them.
inline void SetKeys(capnp::List<schema::BlockKey>::Builder list, uint64_t first) {
  for (unsigned i = 0; i < list.size(); ++i) {
    list[i].setHi(OpaqueKeyNamespace("test", "").Key(first + i).hi);
    list[i].setLo(first + i);
  }
}

// Tenant team-a's keys as its nodes hold and announce them: in its key space (KeySalt).
struct TeamAKeys {
  BlockKey Key(uint64_t id) const {
    return KeySalt("team-a").Apply(OpaqueKeyNamespace("test", "").Key(id));
  }
};
inline void SetNodeKeys(capnp::List<schema::BlockKey>::Builder list, uint64_t first) {
  for (unsigned i = 0; i < list.size(); ++i) {
    const BlockKey key = TeamAKeys().Key(first + i);
    list[i].setHi(key.hi);
    list[i].setLo(key.lo);
  }
}

class CoordinatorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorNodeOptions options;
    options.rpc.listen = {"127.0.0.1:0"};
    options.tokens = *auth::TokenStore::FromYaml(
        "tenants:\n"
        "  - {name: team-a, token: " +
            kTokenA +
            "}\n"
            "  - {name: team-b, token: " +
            kTokenB +
            "}\n"
            "engines:\n"
            "  - {name: engine, token: " +
            kEngineToken +
            ", tenants: [team-a]}\n"
            "nodes:\n"
            "  - {name: cluster-nodes, token: " +
            kNodeToken + "}\n",
        "tokens");
    options.registry = &registry_;
    node_ = *CoordinatorNode::Create(std::move(options));
    address_ = node_->endpoints()[0];
  }

  // Worker `node`'s link options: this coordinator, the node credential, incarnation 1.
  NodeLinkOptions WorkerLink(const std::string& node, const std::string& rpc_address) const {
    NodeLinkOptions options;
    options.connection.address = address_;
    options.connection.token = kNodeToken;
    options.node_id = node;
    options.role = NodeRole::kWorker;
    options.rpc_address = rpc_address;
    options.incarnation = 1;
    return options;
  }

  // Registers worker w1 and publishes 3 blocks (ids 1..3) of team-a's salt scope.
  void WorkerStoresThreeBlocksOfTeamA(CoordinatorClient& worker) {
    auto reg = worker.coordinator().registerRequest();
    auto info = reg.initNode();
    info.setNodeId("w1");
    info.setRpcAddress("10.0.0.1:7401");
    info.setIncarnation(1);
    ASSERT_TRUE(worker.Send(kj::mv(reg)).ok());
    auto snapshot = worker.coordinator().publishSnapshotRequest();
    auto s = snapshot.initSnapshot();
    s.setNodeId("w1");
    s.setIncarnation(1);
    s.setLast(true);
    ASSERT_TRUE(worker.Send(kj::mv(snapshot)).ok());
    auto publish = worker.coordinator().publishEventsRequest();
    auto batch = publish.initBatch();
    batch.setNodeId("w1");
    batch.setIncarnation(1);
    auto stored = batch.initEvents(1)[0].initStored();
    SetNodeKeys(stored.initKeys(3), 1);
    stored.setSaltScope(SaltScope("team-a"));
    stored.setPriority(50);
    auto response = publish.send().wait(worker.ws());
    ASSERT_EQ(response.getStatus(), schema::EventAckStatus::APPLIED);
    ASSERT_EQ(response.getNextSequence(), 1u);
  }

  uint32_t LookupMatched(CoordinatorClient& tenant) {
    auto request = tenant.coordinator().lookupRequest();
    SetKeys(request.initRequest().initKeys(4), 1);
    auto response = request.send().wait(tenant.ws());
    return response.getResult().getMatchedBlocks();
  }

  MetricsRegistry registry_;
  std::unique_ptr<CoordinatorNode> node_;
  std::string address_;
};

}  // namespace kvtier::coordinator::service_test
