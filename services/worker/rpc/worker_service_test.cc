// The Worker capability over a real loopback connection: processes attach the pool and
// map it themselves, reuse each other's blocks by key within a tenant (never across
// tenants), and a connection that drops gives back every block it held. Each test runs
// with the worker on the RPC server's loop (`kvtier worker`) and on a thread of its own
// (`kvtier up`).
#include <capnp/ez-rpc.h>
#include <kj/async-io.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>

#include "services/rpc/loop_thread.h"
#include "services/rpc/rpc_server.h"
#include "services/rpc/schema/kvtier.capnp.h"
#include "services/rpc/session_service.h"
#include "services/rpc/status_mapping.h"
#include "common/shared_pool_memory.h"
#include "services/worker/rpc/worker_service.h"
#include "tests/testing/test_util.h"
#include "services/worker/testing/worker_testing.h"

namespace kvtier::worker {
namespace {

namespace schema = kvtier::rpc::schema;
const std::string kTokenA(40, 'a');
const std::string kTokenA2(40, 'c');  // a second token of the same salt
const std::string kTokenB(40, 'b');
const std::string kEngine(40, 'e');  // an engine acting for every tenant above
const std::string kNode(40, 'n');    // a node credential: sees the pool-wide counts

using testing::TestLayout;

void SetLayout(schema::KvLayout::Builder b, uint32_t head_dim = 8) {
  b.setNumLayers(2);
  b.setNumKvHeads(2);
  b.setHeadDim(head_dim);
  b.setTokensPerBlock(4);
  b.setDtype(schema::Dtype::FP16);
}

// One process's connection (own KJ event loop) holding its Worker capability.
class Client {
 public:
  Client(const std::string& address, const std::string& token, const std::string& act_for = "")
      : client_(address), worker_(Connect(token, act_for)) {}

  template <typename Params, typename Results>
  Result<capnp::Response<Results>> Call(capnp::Request<Params, Results> request) {
    try {
      return request.send().wait(client_.getWaitScope());
    } catch (const kj::Exception& e) {
      return rpc::ExceptionToStatus(e);
    }
  }
  schema::Worker::Client& worker() { return worker_; }

  // Allocates `tokens` tokens 0.. with one key per full block (keys 1, 2, ...).
  Result<std::vector<uint32_t>> Allocate(uint64_t sequence, uint32_t tokens,
                                         uint32_t* reused = nullptr) {
    auto request = worker_.allocateRequest();
    request.setSequenceId(sequence);
    request.setNumTokens(tokens);
    auto keys = request.initKeys(tokens / 4);
    for (unsigned i = 0; i < keys.size(); ++i) {
      keys[i].setHi(0x4000 + i);
      keys[i].setLo(i);
    }
    auto list = request.initTokens(tokens);
    for (unsigned i = 0; i < tokens; ++i) list.set(i, i);
    auto response = Call(kj::mv(request));
    if (!response.ok()) return response.status();
    if (reused != nullptr) *reused = response->getAllocation().getReusedBlocks();
    std::vector<uint32_t> table;
    for (uint32_t id : response->getAllocation().getBlockIds()) table.push_back(id);
    return table;
  }

  Status Commit(uint64_t sequence, uint32_t blocks) {
    auto request = worker_.commitRequest();
    request.setSequenceId(sequence);
    auto keys = request.initKeys(blocks);
    for (unsigned i = 0; i < blocks; ++i) {
      keys[i].setHi(0x4000 + i);
      keys[i].setLo(i);
    }
    auto tokens = request.initTokens(blocks * 4);
    for (unsigned i = 0; i < blocks * 4; ++i) tokens.set(i, i);
    return Call(kj::mv(request)).status();
  }

  uint32_t UsedBlocks() {
    auto stats = Call(worker_.statsRequest());
    return stats.ok() ? stats->getStats().getPools()[0].getUsedBlocks() : UINT32_MAX;
  }

 private:
  schema::Worker::Client Connect(const std::string& token, const std::string& act_for) {
    auto auth = client_.getMain<schema::Bootstrap>().authenticateRequest();
    auth.setToken(token);
    auth.setActFor(act_for);
    auto session = auth.send().wait(client_.getWaitScope()).getSession();
    return session.workerRequest().send().wait(client_.getWaitScope()).getWorker();
  }
  capnp::EzRpcClient client_;
  schema::Worker::Client worker_;
};

// The parameter: whether the worker runs on a thread of its own.
class WorkerServiceTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    worker_ = Worker::Create({.pools = {{TestLayout(), 16}}}).value();
    context_.worker = worker_.get();
    if (GetParam()) {
      worker_thread_ = rpc::LoopThread::Create({.name = "kvt-worker"}).value();
      context_.worker_thread = &worker_thread_->executor();
    }
    tokens_ = auth::TokenStore::FromYaml(
                  "tenants:\n"
                  "  - {name: team-a, token: " +
                      kTokenA +
                      ", salt: salt-a}\n"
                      "  - {name: team-a2, token: " +
                      kTokenA2 +
                      ", salt: salt-a}\n"
                      "  - {name: team-b, token: " +
                      kTokenB +
                      ", salt: salt-b}\n"
                      "engines:\n"
                      "  - {name: engine, token: " +
                      kEngine +
                      ", tenants: [team-a, team-a2, team-b]}\n"
                      "nodes:\n"
                      "  - {name: nodes, token: " +
                      kNode + "}\n",
                  "tokens")
                  .value();
    session_.identity = {"w1", {"worker"}};
    session_.tokens = &tokens_;
    session_.clock = &SystemClock::Instance();
    session_.worker = [this](const auth::Tenant& tenant) {
      return MakeWorkerService(context_, tenant);
    };
    rpc::RpcServerOptions options;
    options.listen = {"127.0.0.1:0"};
    server_ = rpc::RpcServer::Create(std::move(options), rpc::SessionBootstraps(session_)).value();
    address_ = server_->endpoints()[0];
  }
  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<Worker>
      worker_;  // used on the server's thread (or worker_thread_) only, until Shutdown
  std::unique_ptr<rpc::LoopThread> worker_thread_;  // null: the worker runs on the server's thread
  WorkerServiceContext context_;
  auth::TokenStore tokens_ =
      auth::TokenStore::SingleTenant({"x", ""}, std::string(40, 'x')).value();
  rpc::SessionContext session_;
  std::unique_ptr<rpc::RpcServer> server_;
  std::string address_;
};

TEST_P(WorkerServiceTest, ProcessesMapThePoolAndReuseEachOthersBlocks) {
  Client first(address_, kEngine, "team-a");
  auto attach = first.worker().attachPoolRequest();
  SetLayout(attach.initLayout());
  auto attached = first.Call(kj::mv(attach));
  ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  const std::string name = attached->getAttachment().getMapping().getSharedMemory().cStr();
  EXPECT_EQ(attached->getAttachment().getBlockStrideBytes(), 512u);
  auto memory = SharedPoolMemory::Map(name, 16 * 512).value();
  // Process 1 prefills 8 tokens into 2 blocks, writes their KV in place and commits.
  auto table = first.Allocate(1, 8);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  for (uint32_t b : *table) std::memset(static_cast<char*>(memory.data()) + b * 512, 0x30 + b, 512);
  ASSERT_TRUE(first.Commit(1, 2).ok());
  // Process 2, same salt through another token: both blocks reused, the bytes are there.
  Client second(address_, kTokenA2);
  uint32_t reused = 0;
  auto again = second.Allocate(1, 10, &reused);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(reused, 2u);
  EXPECT_EQ((*again)[0], (*table)[0]);
  EXPECT_EQ(static_cast<const uint8_t*>(memory.data())[(*again)[1] * 512 + 7], 0x30 + (*again)[1]);
  // Tenant b sends the same key values: they name other blocks in its key space.
  Client other(address_, kTokenB);
  ASSERT_TRUE(other.Allocate(1, 8, &reused).ok());
  EXPECT_EQ(reused, 0u) << "blocks never cross tenants";
}

// The pool holds every tenant's blocks: a tenant's own token never maps it, and an
// engine maps it only acting for one of its tenants.
TEST_P(WorkerServiceTest, OnlyAnEngineActingForATenantMapsThePool) {
  Client tenant(address_, kTokenA);
  auto attach = tenant.worker().attachPoolRequest();
  SetLayout(attach.initLayout());
  const Status refused = tenant.Call(kj::mv(attach)).status();
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused;
  EXPECT_NE(refused.message().find("engine credential"), std::string::npos) << refused;
  Client engine(address_, kEngine, "team-b");
  auto mapped = engine.worker().attachPoolRequest();
  SetLayout(mapped.initLayout());
  EXPECT_TRUE(engine.Call(kj::mv(mapped)).ok());
}

TEST_P(WorkerServiceTest, ADroppedConnectionGivesBackItsBlocks) {
  Client observer(address_, kNode);
  {
    Client doomed(address_, kTokenA);
    ASSERT_TRUE(doomed.Allocate(1, 12).ok());
    ASSERT_TRUE(doomed.Allocate(2, 5).ok());
    EXPECT_EQ(observer.UsedBlocks(), 5u);
  }  // the connection closes without a single free
  EXPECT_TRUE(kvtier::testing::WaitUntil([&] { return observer.UsedBlocks() == 0; }))
      << observer.UsedBlocks() << " blocks still used";
}

TEST_P(WorkerServiceTest, BadRequestsGetClearErrors) {
  Client client(address_, kEngine, "team-a");
  Client observer(address_, kNode);
  auto attach = client.worker().attachPoolRequest();
  SetLayout(attach.initLayout(), /*head_dim=*/16);
  const Status mismatch = client.Call(kj::mv(attach)).status();
  EXPECT_EQ(mismatch.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(mismatch.message().find("head_dim"), std::string::npos) << mismatch.message();
  auto unknown = client.worker().allocateRequest();
  unknown.setPoolId(4);
  unknown.setNumTokens(2);
  EXPECT_EQ(client.Call(kj::mv(unknown)).status().code(), StatusCode::kNotFound);
  auto free = client.worker().freeRequest();
  free.setSequenceId(77);
  EXPECT_EQ(client.Call(kj::mv(free)).status().code(), StatusCode::kNotFound);
  auto onboard = client.worker().onboardRequest();
  onboard.setSequenceId(78);
  EXPECT_EQ(client.Call(kj::mv(onboard)).status().code(), StatusCode::kNotFound)
      << "no such sequence";
  ASSERT_TRUE(client.Allocate(1, 4).ok());
  EXPECT_EQ(client.Allocate(1, 4).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(client.Allocate(2, 100).status().code(), StatusCode::kResourceExhausted)
      << "25 blocks of 16";
  EXPECT_EQ(observer.UsedBlocks(), 1u) << "the refused allocation took nothing";
  EXPECT_EQ(client.UsedBlocks(), 0u)
      << "a tenant's session sees the pools' sizes, not how full they are";
}

// With the worker on a thread of its own, a call waiting there holds up nothing on the
// RPC loop: while the worker's thread is busy, an allocation sent to it waits, and the
// same connection's next call, which the loop answers itself, comes back. Once the thread
// is free the allocation runs, and only then.
TEST(WorkerServiceThreadTest, TheRpcLoopAnswersWhileTheWorkersThreadIsBusy) {
  auto worker = Worker::Create({.pools = {{TestLayout(), 16}}}).value();
  auto worker_thread = rpc::LoopThread::Create({.name = "kvt-worker"}).value();
  WorkerServiceContext context{
      .worker = worker.get(), .peers = nullptr, .worker_thread = &worker_thread->executor()};
  auth::TokenStore tokens = auth::TokenStore::SingleTenant({"x", ""}, kTokenA).value();
  rpc::SessionContext session;
  session.identity = {"w1", {"worker"}};
  session.tokens = &tokens;
  session.clock = &SystemClock::Instance();
  session.worker = [&](const auth::Tenant& tenant) { return MakeWorkerService(context, tenant); };
  rpc::RpcServerOptions options;
  options.listen = {"127.0.0.1:0"};
  auto server = rpc::RpcServer::Create(std::move(options), rpc::SessionBootstraps(session)).value();

  // The worker's thread is kept busy until `release`; it reads the blocks in use then.
  std::promise<void> busy, release;
  std::atomic<uint32_t> in_use_when_released{UINT32_MAX};
  std::thread blocker([&, released = release.get_future()]() mutable {
    worker_thread->executor().executeSync([&] {
      busy.set_value();
      released.wait();
      in_use_when_released = worker->Stats().pools[0].in_use;
    });
  });
  busy.get_future().wait();

  capnp::EzRpcClient client(server->endpoints()[0]);
  auto& wait = client.getWaitScope();
  auto auth = client.getMain<schema::Bootstrap>().authenticateRequest();
  auth.setToken(kTokenA);
  auto tenant = auth.send().wait(wait).getSession();
  auto worker_cap = tenant.workerRequest().send().wait(wait).getWorker();
  auto allocate = worker_cap.allocateRequest();
  allocate.setSequenceId(1);
  allocate.setNumTokens(8);
  auto keys = allocate.initKeys(2);
  for (unsigned i = 0; i < keys.size(); ++i) keys[i].setLo(i + 1);
  auto allocated = allocate.send();
  // Sent after the allocation on the same connection: the loop reads it after dispatching
  // the allocation. It comes back (within 10 s) while the worker's thread is still busy.
  auto answered = tenant.workerRequest().send().then([](auto) { return true; });
  const bool loop_answered =
      answered
          .exclusiveJoin(client.getIoProvider().getTimer().afterDelay(10 * kj::SECONDS).then([] {
            return false;
          }))
          .wait(wait);
  EXPECT_TRUE(loop_answered) << "the RPC loop waited on the worker's thread";
  release.set_value();
  blocker.join();
  EXPECT_EQ(in_use_when_released, 0u) << "the allocation ran before the worker's thread was free";
  auto response = allocated.wait(wait);
  EXPECT_EQ(response.getAllocation().getBlockIds().size(), 2u);
  EXPECT_EQ(worker_thread->executor().executeSync([&] { return worker->Stats().pools[0].in_use; }),
            2u);
  server->Shutdown();
}

INSTANTIATE_TEST_SUITE_P(WorkerPlacement, WorkerServiceTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "OnAThreadOfItsOwn" : "OnTheRpcLoop";
                         });

}  // namespace
}  // namespace kvtier::worker
