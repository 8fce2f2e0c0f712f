// A cluster of separate kvtier processes on this machine: a coordinator, two workers (A
// and B) and a store. As root, each runs in a network namespace of its own, joined to the
// test by veth pairs on a bridge, and they talk over those addresses only (separate hosts
// as far as the network is concerned); without the rights to make namespaces the test
// says so and runs the same scenarios on loopback ports. An inference client drives them
// through the SDK as an engine would. It shows:
//   - Route picks the worker that holds the longest prefix of a prompt;
//   - killing worker A (SIGKILL) takes its blocks out of lookups within two lease
//     periods, and the client falls back to computing on B without an error;
//   - a restarted coordinator converges to the nodes' holdings from their snapshots, and
//     the engines' clients reach it again without being made anew;
//   - worker B reuses a prefix computed on worker A: fetched over the network from A's
//     pool, and (once A evicted it) from A's store tier, the bytes those of A's engine;
//     inline (blocks this small go so by default), and again with every fetch a keyed
//     get on A's data stream (A's pool blocks held and sent from its pages, off A's loop);
//   - with the workers writing through to the store node, B reuses a prefix A computed
//     through the store, after A was killed.
//   - `kvtier replay` on B onboards from A what A's replay of the same trace computed.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <regex>
#include <thread>

#include "services/client/client.h"
#include "tests/testing/sdk_pool.h"
#include "tests/testing/test_util.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;

const std::string kKvtier = std::string(KVTIER_BIN_DIR) + "/kvtier";
constexpr int kLeaseMs = 1000;

std::string BannerValue(const std::string& banner, const std::string& label) {
  const std::regex line("\\n  " + label + " +(\\S+)");
  std::smatch match;
  return std::regex_search(banner, match, line) ? match[1].str() : "";
}

// Separate "hosts": a network namespace per node, each with a veth pair whose other end
// is on a bridge in the test's namespace (10.199.<n>.1), node i at 10.199.<n>.(10 + i).
// Everything is removed on destruction. Without the rights (not root), or without
// iproute2, `available()` is false and nodes share loopback.
class Network {
 public:
  explicit Network(int nodes)
      : tag_(std::to_string(getpid() % 10000)), subnet_(getpid() % 200 + 20) {
    if (geteuid() != 0) {
      why_not_ = "not root";
      return;
    }
    std::vector<std::string> steps = {"ip link add kvtbr" + tag_ + " type bridge",
                                      "ip addr add " + Subnet(1) + "/24 dev kvtbr" + tag_,
                                      "ip link set kvtbr" + tag_ + " up"};
    for (int i = 0; i < nodes; ++i) {
      const std::string ns = Namespace(i), host = "kvth" + tag_ + "n" + std::to_string(i),
                        peer = "kvtp" + tag_ + "n" + std::to_string(i);
      for (const std::string& step :
           {"ip netns add " + ns, "ip netns exec " + ns + " ip link set lo up",
            "ip link add " + host + " type veth peer name " + peer,
            "ip link set " + peer + " netns " + ns, "ip link set " + host + " master kvtbr" + tag_,
            "ip link set " + host + " up",
            "ip netns exec " + ns + " ip addr add " + Subnet(10 + i) + "/24 dev " + peer,
            "ip netns exec " + ns + " ip link set " + peer + " up"}) {
        steps.push_back(step);
      }
      namespaces_.push_back(ns);
    }
    for (const std::string& step : steps) {
      std::string output;
      if (testing::RunCommand(step + " 2>&1", &output) != 0) {
        why_not_ = "`" + step + "` failed: " + output;
        return;
      }
    }
    available_ = true;
  }
  ~Network() {
    std::string ignored;
    for (const std::string& ns : namespaces_)
      (void)testing::RunCommand("ip netns del " + ns + " 2>&1", &ignored);
    (void)testing::RunCommand("ip link del kvtbr" + tag_ + " 2>&1", &ignored);
  }

  bool available() const { return available_; }
  const std::string& why_not() const { return why_not_; }
  // Node i's address: its namespace's, or loopback.
  std::string Address(int i) const { return available_ ? Subnet(10 + i) : "127.0.0.1"; }
  // The command prefix that runs a program in node i's namespace (empty on loopback).
  std::vector<std::string> Prefix(int i) const {
    if (!available_) return {};
    return {"/usr/sbin/ip", "netns", "exec", Namespace(i)};
  }

 private:
  std::string Namespace(int i) const { return "kvt" + tag_ + "n" + std::to_string(i); }
  std::string Subnet(int host) const {
    return "10.199." + std::to_string(subnet_) + "." + std::to_string(host);
  }

  const std::string tag_;
  const int subnet_;
  std::vector<std::string> namespaces_;
  bool available_ = false;
  std::string why_not_;
};

// One kvtier process (in node `node`'s namespace when there are namespaces), its output
// in a directory of its own.
struct Process {
  Process(const Network& network, int node, std::vector<std::string> args,
          const std::string& name) {
    args.insert(args.begin(), kKvtier);
    const std::vector<std::string> prefix = network.Prefix(node);
    args.insert(args.begin(), prefix.begin(), prefix.end());
    for (const char* flag : {"--auth-enabled", "false", "--metrics-port", "0"})
      args.push_back(flag);
    args.insert(args.end(),
                {"--metrics-bind", network.Address(node), "--data-dir", dir.File(name)});
    child = std::make_unique<ChildProcess>(args, dir.path());
    started = child->WaitForOutput("Stop with Ctrl-C", 20s);
  }
  std::string rpc() const { return BannerValue(child->Stdout(), "rpc"); }

  testing::TempDir dir;
  std::unique_ptr<ChildProcess> child;
  bool started = false;
};

std::vector<BlockKey> Keys(uint32_t first, uint32_t blocks) {
  std::vector<uint32_t> tokens(blocks * 16);
  std::iota(tokens.begin(), tokens.end(), first);
  return client::Client::BlockKeys(tokens, 16);
}

class ClusterTest : public ::testing::Test {
 protected:
  // Nodes: 0 the coordinator, 1 and 2 the workers, 3 the store.
  // Flags every worker gets on top of the fixture's.
  virtual std::vector<std::string> WorkerFlags() const { return {}; }

  void SetUp() override {
    if (!network_.available()) {
      std::printf("[ NOTE     ] no network namespaces (%s): the nodes share loopback\n",
                  network_.why_not().c_str());
    }
    coordinator_ = StartCoordinator();
    ASSERT_TRUE(coordinator_->started) << coordinator_->child->Stderr();
    address_ = coordinator_->rpc();
    for (int w = 0; w < 2; ++w) {
      const std::string name = w == 0 ? "worker-a" : "worker-b";
      std::vector<std::string> args = {"worker",
                                       "--node-name",
                                       name,
                                       "--worker-listen",
                                       Listen(1 + w),
                                       "--node-coordinator",
                                       address_,
                                       "--worker-pool-bytes",
                                       "4194304",
                                       "--store-host-cache-bytes",
                                       "4194304",
                                       "--store-disk-bytes",
                                       "0"};
      for (const std::string& flag : WorkerFlags()) args.push_back(flag);
      workers_.push_back(std::make_unique<Process>(network_, 1 + w, std::move(args), name));
      ASSERT_TRUE(workers_.back()->started) << workers_.back()->child->Stderr();
    }
    store_ = std::make_unique<Process>(
        network_, 3,
        std::vector<std::string>{"store", "--node-name", "store-0", "--store-listen", Listen(3),
                                 "--node-coordinator", address_, "--store-disk-bytes", "16777216"},
        "store");
    ASSERT_TRUE(store_->started) << store_->child->Stderr();
  }

  // Node i's RPC listen address: a fixed port in its own namespace. On shared loopback, the
  // coordinator's held port (it restarts there) and any free one for the others.
  std::string Listen(int node) const {
    if (network_.available()) return network_.Address(node) + ":" + std::to_string(7400 + node);
    return node == 0 ? coordinator_port_.address() : network_.Address(node) + ":0";
  }

  // The coordinator, at its address of before when it restarts.
  std::unique_ptr<Process> StartCoordinator() {
    const std::string listen = address_.empty() ? Listen(0) : address_;
    return std::make_unique<Process>(
        network_, 0,
        std::vector<std::string>{"coordinator", "--coordinator-listen", listen,
                                 "--coordinator-lease-ttl-ms", std::to_string(kLeaseMs)},
        "coordinator");
  }

  // An engine on worker `w`, with lookups and routing at the coordinator.
  std::unique_ptr<client::Client> Engine(size_t w) {
    auto c = client::Client::Connect(
        {.address = workers_[w]->rpc(), .coordinator_address = address_, .token = "auth is off"});
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // Computes a prompt's blocks on the engine's worker and commits them.
  void Compute(client::Client& engine, uint64_t sequence, const std::vector<BlockKey>& keys) {
    auto table = engine.Allocate(
        {.sequence = sequence, .keys = keys, .num_tokens = uint32_t(keys.size() * 16)});
    ASSERT_TRUE(table.ok()) << table.status();
    ASSERT_TRUE(engine.Commit(sequence, keys).ok());
    ASSERT_TRUE(engine.Free(sequence).ok());
  }

  // A's engine computes a prompt (block i filled with `fill` + i) and commits it.
  void ComputeOnA(client::Client& a, client::MappedPool& pool_a, uint64_t sequence,
                  const std::vector<BlockKey>& keys, uint8_t fill) {
    auto table =
        a.Allocate({.sequence = sequence, .keys = keys, .num_tokens = uint32_t(keys.size() * 16)});
    ASSERT_TRUE(table.ok()) << table.status();
    for (size_t i = 0; i < keys.size(); ++i) {
      std::span<uint8_t> block = pool_a.block(table->block_ids[i]);
      std::fill(block.begin(), block.end(), uint8_t(fill + i));
    }
    ASSERT_TRUE(a.Commit(sequence, keys).ok());
    ASSERT_TRUE(a.Free(sequence).ok());
  }

  // Whether some location of the prompt's last block is `node`, waiting up to 5 s for it;
  // with `only`, whether `node` is the sole one.
  bool Located(client::Client& b, const std::vector<BlockKey>& keys, const std::string& node,
               bool only = false) {
    return testing::WaitUntil([&] {
      auto lookup = b.Lookup(keys);
      if (!lookup.ok() || lookup->matched_blocks != keys.size()) return false;
      const auto& where = lookup->locations.back();
      const bool found =
          std::any_of(where.begin(), where.end(), [&](const auto& l) { return l.node_id == node; });
      return found && (!only || where.size() == 1);
    });
  }

  // B's engine: lookup, allocate (B has nothing), onboard from the nodes the lookup names;
  // every block comes from another node with the bytes A's engine wrote.
  void OnboardOnB(client::Client& b, client::MappedPool& pool_b, uint64_t sequence,
                  const std::vector<BlockKey>& keys, uint8_t fill) {
    auto lookup = b.Lookup(keys);
    ASSERT_TRUE(lookup.ok()) << lookup.status();
    auto table =
        b.Allocate({.sequence = sequence, .keys = keys, .num_tokens = uint32_t(keys.size() * 16)});
    ASSERT_TRUE(table.ok()) << table.status();
    ASSERT_EQ(table->reused_blocks, 0u);
    auto onboarded = b.Onboard(sequence, keys, {}, client::Client::SourcesOf(*lookup));
    ASSERT_TRUE(onboarded.ok()) << onboarded.status();
    EXPECT_EQ(onboarded->from_remote, keys.size());
    EXPECT_EQ(onboarded->cached_blocks, keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      std::span<uint8_t> block = pool_b.block(table->block_ids[i]);
      EXPECT_EQ(std::count(block.begin(), block.end(), uint8_t(fill + i)),
                std::ptrdiff_t(block.size()))
          << "block " << i;
    }
    ASSERT_TRUE(b.Free(sequence).ok());
  }

  // B onboards two prefixes A computed: one from A's pool, one A evicted to its store tier.
  void ReuseAPrefixComputedOnWorkerA();

  Network network_{4};
  const testing::ReservedPort coordinator_port_;  // used on shared loopback
  std::string address_;
  std::unique_ptr<Process> coordinator_, store_;
  std::vector<std::unique_ptr<Process>> workers_;
};

TEST_F(ClusterTest, RoutingFailoverAndCoordinatorRestart) {
  auto a = Engine(0), b = Engine(1);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  // Worker A ("worker-a/worker") computes one prompt, worker B another.
  const std::vector<BlockKey> on_a = Keys(100, 4), on_b = Keys(900, 6);
  Compute(*a, 1, on_a);
  Compute(*b, 1, on_b);
  auto routed_address = [&](const std::vector<BlockKey>& keys, const std::string& want) {
    std::string seen;
    testing::WaitUntil([&] {
      auto route = a->Route(keys);
      seen = route.ok() ? route->rpc_address + "/" + std::to_string(route->prefix_blocks)
                        : route.status().ToString();
      return seen == want;
    });
    return seen;
  };
  // Route picks the worker that holds the prompt's prefix.
  EXPECT_EQ(routed_address(on_a, workers_[0]->rpc() + "/4"), workers_[0]->rpc() + "/4");
  EXPECT_EQ(routed_address(on_b, workers_[1]->rpc() + "/6"), workers_[1]->rpc() + "/6");
  auto route = a->Route(on_a);
  ASSERT_TRUE(route.ok()) << route.status();
  EXPECT_EQ(route->node_id, "worker-a/worker");
  auto found = a->Lookup(on_a);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->matched_blocks, 4u);

  // Worker A is killed: within two lease periods its blocks leave lookups.
  workers_[0]->child->Signal(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  uint32_t matched = 4;
  while (matched > 0 &&
         std::chrono::steady_clock::now() - killed < std::chrono::milliseconds(4 * kLeaseMs)) {
    auto lookup = b->Lookup(on_a);
    ASSERT_TRUE(lookup.ok()) << lookup.status();
    matched = lookup->matched_blocks;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(matched, 0u);
  EXPECT_LE(std::chrono::steady_clock::now() - killed,
            std::chrono::milliseconds(2 * kLeaseMs + 500))
      << "gone within two lease periods";
  // The client falls back to computing the prompt on B: no error, nothing reused.
  EXPECT_EQ(routed_address(on_a, workers_[1]->rpc() + "/0"), workers_[1]->rpc() + "/0");
  auto fallback = b->Allocate({.sequence = 2, .keys = on_a, .num_tokens = 64});
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  EXPECT_EQ(fallback->reused_blocks, 0u);
  ASSERT_TRUE(b->Commit(2, on_a).ok());

  // The coordinator restarts on the same address: the index converges from B's snapshot.
  coordinator_->child->Signal(SIGKILL);
  coordinator_->child->Wait(10s);
  coordinator_ = StartCoordinator();
  ASSERT_TRUE(coordinator_->started) << coordinator_->child->Stderr();
  // B's engine keeps its client: its coordinator connection is made again on its own.
  uint32_t converged = 0;
  testing::WaitUntil(
      [&] {
        auto lookup = b->Lookup(on_b);
        converged = lookup.ok() ? lookup->matched_blocks : 0;
        return converged == 6;
      },
      10s);
  EXPECT_EQ(converged, 6u) << "B's blocks are indexed again";
  auto again = b->Lookup(on_a);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->matched_blocks, 4u) << "the prompt B recomputed after A died";
}

TEST_F(ClusterTest, WorkerBReusesAPrefixComputedOnWorkerA) { ReuseAPrefixComputedOnWorkerA(); }

// `kvtier replay` against a cluster onboards from the nodes its lookups name, as an engine
// does. A trace of two prompts (trace blocks 1,2 then 1,2,3; 32 pool blocks each) is
// replayed on A, which computes every block, then on B: B's first prompt finds blocks 1,2
// on A, its second reuses them in its own pool and finds block 3 on A.
TEST_F(ClusterTest, AReplayOnWorkerBOnboardsWhatWorkerAServed) {
  testing::TempDir dir;
  ASSERT_TRUE(testing::WriteFile(
      dir.File("trace.jsonl"),
      "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 1, \"hash_ids\": [1, 2]}\n"
      "{\"timestamp\": 1, \"input_length\": 1536, \"output_length\": 1, \"hash_ids\": [1, 2, "
      "3]}\n"));
  const auto replay = [&](size_t w) {
    ChildProcess child(
        {kKvtier, "replay", "--trace", dir.File("trace.jsonl"), "--connect", workers_[w]->rpc(),
         "--coordinator", address_, "--token", "auth is off", "--json"},
        dir.path());
    EXPECT_EQ(child.Wait(60s), 0) << child.Stderr();
    return child.Stdout();
  };
  const std::string on_a = replay(0);
  EXPECT_NE(on_a.find("\"hits_by_tier\": {\"gpu\": 2, \"host\": 0, \"disk\": 0, \"remote\": 0}"),
            std::string::npos)
      << on_a;
  // A's 96 pool blocks reach the coordinator's index with A's next event batch.
  auto b = Engine(1);
  ASSERT_TRUE(b != nullptr);
  testing::WaitUntil(
      [&] {
        auto stats = b->GetCoordinatorStats();
        return stats.ok() && stats->index_blocks >= 96;
      },
      10s);
  const std::string on_b = replay(1);
  EXPECT_NE(on_b.find("\"hits_by_tier\": {\"gpu\": 2, \"host\": 0, \"disk\": 0, \"remote\": 3}"),
            std::string::npos)
      << on_b;
}

// Every peer fetch on the data stream, however small its blocks (64 KiB and up by default).
class ClusterStreamingEveryFetchTest : public ClusterTest {
 protected:
  std::vector<std::string> WorkerFlags() const override {
    return {"--worker-fetch-stream-min-block-bytes", "0"};
  }
};

TEST_F(ClusterStreamingEveryFetchTest, WorkerBReusesAPrefixComputedOnWorkerA) {
  ReuseAPrefixComputedOnWorkerA();
}

void ClusterTest::ReuseAPrefixComputedOnWorkerA() {
  auto a = Engine(0), b = Engine(1);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  auto pool_a = testing::MapWorkerPool(*a), pool_b = testing::MapWorkerPool(*b);
  ASSERT_TRUE(pool_a.ok() && pool_b.ok()) << "both pools are host shared memory on this machine";

  // From A's pool, over the (veth) network.
  const std::vector<BlockKey> from_pool = Keys(2000, 4);
  ComputeOnA(*a, *pool_a, 1, from_pool, 0x40);
  ASSERT_TRUE(Located(*b, from_pool, "worker-a/worker"));
  OnboardOnB(*b, *pool_b, 1, from_pool, 0x40);
  // B now holds it too: the next engine on B reuses it in place.
  auto reused = b->Allocate({.sequence = 2, .keys = from_pool, .num_tokens = 64});
  ASSERT_TRUE(reused.ok()) << reused.status();
  EXPECT_EQ(reused->reused_blocks, 4u);
  ASSERT_TRUE(b->Free(2).ok());

  // From A's store tier: a second prefix, pushed out of A's pool by a prompt that needs
  // all of it.
  const std::vector<BlockKey> from_store = Keys(3000, 4);
  ComputeOnA(*a, *pool_a, 3, from_store, 0x60);
  const uint32_t pool_blocks = a->GetWorkerStats()->total_blocks;
  auto flood =
      a->Allocate({.sequence = 4, .keys = Keys(5000, pool_blocks), .num_tokens = pool_blocks * 16});
  ASSERT_TRUE(flood.ok()) << flood.status();
  ASSERT_TRUE(a->Free(4).ok());
  ASSERT_TRUE(Located(*b, from_store, "worker-a/store", /*only=*/true));
  OnboardOnB(*b, *pool_b, 3, from_store, 0x60);
}

// The workers write every committed block through to the store node.
class ClusterWithWriteThroughTest : public ClusterTest {
 protected:
  std::vector<std::string> WorkerFlags() const override {
    return {"--worker-write-through-stores", "store-0/store"};
  }
};

TEST_F(ClusterWithWriteThroughTest, WorkerBReusesAPrefixThroughTheStoreAfterWorkerAIsKilled) {
  auto a = Engine(0), b = Engine(1);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  auto pool_a = testing::MapWorkerPool(*a), pool_b = testing::MapWorkerPool(*b);
  ASSERT_TRUE(pool_a.ok() && pool_b.ok()) << "both pools are host shared memory on this machine";

  // A computes a prompt of 4 blocks; the store node indexes its copy beside A's pool.
  const std::vector<BlockKey> keys = Keys(7000, 4);
  ComputeOnA(*a, *pool_a, 1, keys, 0x70);
  ASSERT_TRUE(Located(*b, keys, "store-0/store")) << "written through to the store";
  // A dies without a word (SIGKILL): once its lease lapses the store alone holds the prefix.
  workers_[0]->child->Signal(SIGKILL);
  ASSERT_TRUE(Located(*b, keys, "store-0/store", /*only=*/true));
  // B onboards the prefix from the store over the network, the bytes A's engine wrote.
  OnboardOnB(*b, *pool_b, 1, keys, 0x70);
}

}  // namespace
}  // namespace kvtier
