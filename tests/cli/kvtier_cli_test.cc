// The kvtier binary as a user runs it: `up` serves and stops cleanly, bad input exits 2
// and starts nothing, commands of later releases say so and exit 1.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "tests/testing/test_util.h"

namespace kvtier {
namespace {

using std::chrono::seconds;
using testing::ChildProcess;

const std::string kKvtier = std::string(KVTIER_BIN_DIR) + "/kvtier";

// The value after `label` on its banner line ("  metrics   http://127.0.0.1:9400/metrics").
std::string BannerValue(const std::string& banner, const std::string& label) {
  const std::regex line("\\n  " + label + " +(\\S+)");
  std::smatch match;
  return std::regex_search(banner, match, line) ? match[1].str() : "";
}

std::string HttpGet(const std::string& url) {
  // url: http://HOST:PORT/PATH
  const std::string rest = url.substr(7);
  const size_t slash = rest.find('/');
  return testing::SendRaw(rest.substr(0, slash), "GET " + rest.substr(slash) + " HTTP/1.1\r\n\r\n",
                          seconds(5))
      .received;
}

// The names of process `pid`'s threads, as top -H shows them.
std::multiset<std::string> ThreadNames(int pid) {
  std::multiset<std::string> names;
  std::error_code error;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", error)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name)) names.insert(name);
  }
  return names;
}

// /readyz of the endpoint at `base` once it answers 200 (a node registered), or after 10 s.
std::string WaitUntilReady(const std::string& base) {
  std::string ready;
  testing::WaitUntil(
      [&] {
        ready = HttpGet(base + "/readyz");
        return ready.starts_with("HTTP/1.1 200");
      },
      seconds(10));
  return ready;
}

class KvtierUpTest : public ::testing::TestWithParam<int> {};

TEST_P(KvtierUpTest, ServesEndpointsAndStopsCleanlyOnSignal) {
  testing::TempDir dir;
  const std::string data_dir = dir.File("data");
  ChildProcess up({kKvtier, "up", "--metrics-port", "0", "--coordinator-listen", "127.0.0.1:0",
                   "--data-dir", data_dir, "--metrics-bind", "127.0.0.1"},
                  dir.path());
  ASSERT_TRUE(up.WaitForOutput("Stop with Ctrl-C", seconds(20))) << up.Stdout() << up.Stderr();
  const std::string banner = up.Stdout();
  const std::string metrics_url = BannerValue(banner, "metrics");
  ASSERT_TRUE(metrics_url.starts_with("http://127.0.0.1:")) << banner;
  const std::string base =
      metrics_url.substr(0, metrics_url.size() - std::string("/metrics").size());

  EXPECT_TRUE(HttpGet(base + "/healthz").starts_with("HTTP/1.1 200")) << HttpGet(base + "/healthz");
  // Its threads say what they serve: the RPC loop (every role's calls, in `up`), the
  // worker's own loop (the worker's calls run there, off the RPC loop) and the endpoint.
  const std::multiset<std::string> threads = ThreadNames(up.pid());
  EXPECT_EQ(threads.count("kvt-coord"), 1u) << ::testing::PrintToString(threads);
  EXPECT_EQ(threads.count("kvt-worker"), 1u) << ::testing::PrintToString(threads);
  EXPECT_EQ(threads.count("kvt-http"), 1u) << ::testing::PrintToString(threads);
  EXPECT_TRUE(HttpGet(base + "/readyz").starts_with("HTTP/1.1 200"));

  // The live /metrics output passes promtool.
  const std::string response = HttpGet(metrics_url);
  ASSERT_TRUE(response.starts_with("HTTP/1.1 200")) << response;
  const std::string body = response.substr(response.find("\r\n\r\n") + 4);
  // Every embedded role exports its series: coordinator, worker, store.
  for (const char* series :
       {"kvtier_build_info{", "kvtier_worker_pool_blocks{", "kvtier_store_blocks{tier=\"host\"}",
        "kvtier_store_capacity_bytes{tier=\"disk\"}", "kvtier_role_info{role=\"coordinator\"} 1",
        "kvtier_role_info{role=\"worker\"} 1", "kvtier_role_info{role=\"store\"} 1",
        "kvtier_store_io_errors_total{tier=\"disk\"} 0"}) {
    EXPECT_NE(body.find(series), std::string::npos) << series;
  }
  ASSERT_TRUE(testing::WriteFile(dir.File("metrics.txt"), body));
  std::string promtool;
  EXPECT_EQ(testing::RunCommand("promtool check metrics < " + dir.File("metrics.txt"), &promtool),
            0)
      << promtool;
  EXPECT_EQ(promtool, "") << "promtool lint findings";

  // The generated token authenticates against the printed RPC endpoint.
  const std::string rpc = BannerValue(banner, "rpc");
  std::string version;
  EXPECT_EQ(
      testing::RunCommand(
          kKvtier + " version --connect " + rpc + " --token-file " + data_dir + "/token", &version),
      0)
      << version;
  EXPECT_NE(version.find("tenant default"), std::string::npos) << version;

  // A replay of the built-in workload through the same endpoint (what `make run` does):
  // the trace's 512-token blocks are 32 of this pool's 16-token blocks.
  std::string replay;
  EXPECT_EQ(testing::RunCommand(kKvtier + " replay --connect " + rpc + " --token-file " + data_dir +
                                    "/token --conversations 20 --json",
                                &replay),
            0)
      << replay;
  EXPECT_NE(replay.find("\"requests\": "), std::string::npos) << replay;
  EXPECT_NE(replay.find("\"refused_requests\": 0,"), std::string::npos) << replay;
  EXPECT_EQ(replay.find("\"block_hit_rate\": 0.000000"), std::string::npos)
      << "chat prompts share prefixes: " << replay;

  // `kvtier status` reports what the replay left: both nodes registered, blocks indexed,
  // the replay's lookups counted, the worker's pool. The index learns from events (sent
  // every 100 ms), so it may lag the replay's last commits: read it until it shows blocks,
  // for at most 5 s.
  std::string status;
  const auto read_status = [&] {
    status.clear();
    return testing::RunCommand(
               kKvtier + " status --json --connect " + rpc + " --token-file " + data_dir + "/token",
               &status) == 0 &&
           status.find("\"index_blocks\": 0,") == std::string::npos;
  };
  EXPECT_TRUE(testing::WaitUntil(read_status, std::chrono::seconds(5))) << status;
  EXPECT_NE(status.find("\"nodes\": 2,"), std::string::npos) << status;
  EXPECT_EQ(status.find("\"index_blocks\": 0,"), std::string::npos) << status;
  EXPECT_EQ(status.find("\"lookups\": 0,"), std::string::npos) << status;
  EXPECT_NE(status.find("\"pools\": [\"L4/H2/D64/T16/fp16/W0/S0\"]"), std::string::npos) << status;
  std::string refused;
  EXPECT_EQ(
      testing::RunCommand(kKvtier + " status --connect " + rpc + " --token not-a-token", &refused),
      1);
  EXPECT_NE(refused.find("UNAUTHENTICATED"), std::string::npos) << refused;

  up.Signal(GetParam());
  EXPECT_EQ(up.Wait(seconds(10)), 0) << up.Stderr();
  EXPECT_NE(up.Stderr().find("stopped cleanly"), std::string::npos) << up.Stderr();
}

INSTANTIATE_TEST_SUITE_P(Signals, KvtierUpTest, ::testing::Values(SIGINT, SIGTERM),
                         [](const auto& info) {
                           return info.param == SIGINT ? "SIGINT" : "SIGTERM";
                         });

struct BadInput {
  const char* name;
  std::vector<std::string> args;
  std::string config_yaml;  // written to a file passed with --config when not empty
  std::string expected;     // in stderr
};

void PrintTo(const BadInput& c, std::ostream* os) { *os << c.name; }

class KvtierBadInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(KvtierBadInputTest, ExitsTwoNamingTheProblemAndStartsNothing) {
  const BadInput& c = GetParam();
  testing::TempDir dir;
  std::vector<std::string> argv = {kKvtier};
  argv.insert(argv.end(), c.args.begin(), c.args.end());
  argv.insert(argv.end(), {"--data-dir", dir.File("data"), "--metrics-port", "0",
                           "--coordinator-listen", "127.0.0.1:0"});
  if (!c.config_yaml.empty()) {
    ASSERT_TRUE(testing::WriteFile(dir.File("kvtier.yaml"), c.config_yaml));
    argv.insert(argv.end(), {"--config", dir.File("kvtier.yaml")});
  }
  ChildProcess child(argv, dir.path());
  EXPECT_EQ(child.Wait(seconds(10)), 2) << child.Stdout() << child.Stderr();
  EXPECT_NE(child.Stderr().find(c.expected), std::string::npos) << child.Stderr();
  EXPECT_EQ(child.Stdout().find("rpc"), std::string::npos)
      << "no server banner: " << child.Stdout();
  EXPECT_FALSE(std::filesystem::exists(dir.File("data"))) << "nothing is created";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, KvtierBadInputTest,
    ::testing::Values(
        BadInput{"UnknownFlag", {"up", "--no-such-flag"}, "", "--no-such-flag"},
        BadInput{"FlagOutOfRange",
                 {"up", "--coordinator-max-message-bytes", "12"},
                 "",
                 "coordinator.max_message_bytes: \"12\" is out of range [4096, 1073741824]"},
        BadInput{"FractionOutOfRange",
                 {"up", "--worker-free-memory-fraction", "1.5"},
                 "",
                 "worker.free_memory_fraction: \"1.5\" is out of range (0, 1]"},
        BadInput{"StagingBelowABlock",
                 {"up", "--worker-offload-staging-bytes", "1000"},
                 "",
                 "worker.offload_staging_bytes: 1000 bytes hold no block of the worker's layout"},
        BadInput{"InvalidYaml", {"up"}, "metrics: [1, 2\n", "invalid YAML at line"},
        BadInput{
            "UnknownField", {"up"}, "metrics:\n  prot: 9400\n", "unknown field \"metrics.prot\""},
        BadInput{"YamlOutOfRange", {"up"}, "log: {level: chatty}\n", "log.level"},
        BadInput{"CoordinatorWithoutTokens", {"coordinator"}, "", "auth.token_file: required"}),
    [](const auto& info) { return std::string(info.param.name); });

// `kvtier store` beside `kvtier coordinator`, two processes over loopback: the store
// registers (readiness turns green), serves its tiers, and on SIGTERM drains: it leaves
// the coordinator and exits 0.
TEST(KvtierCliTest, StoreRegistersWithTheCoordinatorAndDrainsOnSigterm) {
  testing::TempDir dir, store_dir;  // each process's output in its own directory
  ChildProcess coordinator(
      {kKvtier, "coordinator", "--auth-enabled", "false", "--coordinator-listen", "127.0.0.1:0",
       "--metrics-port", "0", "--metrics-bind", "127.0.0.1", "--data-dir", dir.File("c")},
      dir.path());
  ASSERT_TRUE(coordinator.WaitForOutput("Stop with Ctrl-C", seconds(20))) << coordinator.Stderr();
  const std::string coordinator_rpc = BannerValue(coordinator.Stdout(), "rpc");
  ChildProcess store({kKvtier, "store", "--auth-enabled", "false", "--store-listen", "127.0.0.1:0",
                      "--node-coordinator", coordinator_rpc, "--metrics-port", "0",
                      "--metrics-bind", "127.0.0.1", "--data-dir", dir.File("s"),
                      "--store-host-cache-bytes", "1048576", "--store-disk-bytes", "4194304"},
                     store_dir.path());
  ASSERT_TRUE(store.WaitForOutput("Stop with Ctrl-C", seconds(20)))
      << store.Stdout() << store.Stderr();
  const std::string banner = store.Stdout();
  const std::string metrics_url = BannerValue(banner, "metrics");
  const std::string base =
      metrics_url.substr(0, metrics_url.size() - std::string("/metrics").size());
  const std::string ready = WaitUntilReady(base);
  EXPECT_TRUE(ready.starts_with("HTTP/1.1 200")) << "registered: " << ready;
  const std::string metrics = HttpGet(metrics_url);
  EXPECT_NE(metrics.find("kvtier_role_info{role=\"store\"} 1"), std::string::npos) << metrics;
  EXPECT_EQ(metrics.find("kvtier_role_info{role=\"coordinator\"}"), std::string::npos);
  EXPECT_NE(metrics.find("kvtier_store_capacity_bytes{tier=\"disk\"} 4194304"), std::string::npos);
  std::string version;
  EXPECT_EQ(
      testing::RunCommand(kKvtier + " version --connect " + BannerValue(banner, "rpc"), &version),
      0)
      << version;
  EXPECT_NE(version.find("roles store"), std::string::npos) << version;
  std::string status;
  EXPECT_EQ(
      testing::RunCommand(kKvtier + " status --connect " + BannerValue(banner, "rpc"), &status), 0)
      << status;
  EXPECT_NE(status.find("coordinator  not served here"), std::string::npos) << status;
  EXPECT_NE(status.find("worker       not served here"), std::string::npos) << status;
  const std::multiset<std::string> threads = ThreadNames(store.pid());
  for (const char* name : {"kvt-store", "kvt-stream-0", "kvt-agent", "kvt-http"}) {
    EXPECT_EQ(threads.count(name), 1u) << name << " in " << ::testing::PrintToString(threads);
  }

  store.Signal(SIGTERM);
  EXPECT_EQ(store.Wait(seconds(30)), 0) << store.Stderr();
  EXPECT_NE(store.Stderr().find("drained: left the coordinator"), std::string::npos)
      << store.Stderr();
  coordinator.Signal(SIGTERM);
  EXPECT_EQ(coordinator.Wait(seconds(10)), 0) << coordinator.Stderr();
}

// `kvtier worker` beside `kvtier coordinator`: the worker registers (readiness turns
// green), the example engine prefills and decodes through it (reusing its own earlier turn
// and equal to recomputation), and SIGTERM drains it: exit 0.
TEST(KvtierCliTest, WorkerServesAnEngineAndDrainsOnSigterm) {
  testing::TempDir dir, worker_dir;  // each process's output in its own directory
  ChildProcess coordinator(
      {kKvtier, "coordinator", "--auth-enabled", "false", "--coordinator-listen", "127.0.0.1:0",
       "--metrics-port", "0", "--metrics-bind", "127.0.0.1", "--data-dir", dir.File("c")},
      dir.path());
  ASSERT_TRUE(coordinator.WaitForOutput("Stop with Ctrl-C", seconds(20))) << coordinator.Stderr();
  // The pool has the example engine's layout (2 layers, 2 KV heads of 8 dims, fp32).
  ChildProcess worker({kKvtier,
                       "worker",
                       "--auth-enabled",
                       "false",
                       "--worker-listen",
                       "127.0.0.1:0",
                       "--node-coordinator",
                       BannerValue(coordinator.Stdout(), "rpc"),
                       "--metrics-port",
                       "0",
                       "--metrics-bind",
                       "127.0.0.1",
                       "--data-dir",
                       dir.File("w"),
                       "--worker-num-layers",
                       "2",
                       "--worker-num-kv-heads",
                       "2",
                       "--worker-head-dim",
                       "8",
                       "--worker-tokens-per-block",
                       "4",
                       "--worker-dtype",
                       "fp32",
                       "--worker-pool-bytes",
                       "1048576",
                       "--store-host-cache-bytes",
                       "1048576",
                       "--store-disk-bytes",
                       "0"},
                      worker_dir.path());
  ASSERT_TRUE(worker.WaitForOutput("Stop with Ctrl-C", seconds(20)))
      << worker.Stdout() << worker.Stderr();
  const std::string banner = worker.Stdout();
  const std::string metrics_url = BannerValue(banner, "metrics");
  const std::string base =
      metrics_url.substr(0, metrics_url.size() - std::string("/metrics").size());
  const std::string ready = WaitUntilReady(base);
  EXPECT_TRUE(ready.starts_with("HTTP/1.1 200")) << "registered: " << ready;
  const std::string metrics = HttpGet(metrics_url);
  EXPECT_NE(metrics.find("kvtier_role_info{role=\"worker\"} 1"), std::string::npos) << metrics;

  std::string demo;
  EXPECT_EQ(testing::RunCommand(std::string(KVTIER_BIN_DIR) +
                                    "/tiny_engine_demo --turns 2 --prefill-chunk 4 --connect " +
                                    BannerValue(banner, "rpc"),
                                &demo),
            0)
      << demo;
  EXPECT_NE(demo.find("turn 1: 10 prompt tokens, 0 from the cache, 10 computed (3 prefill chunks); "
                      "first token equals recomputation"),
            std::string::npos)
      << demo;
  EXPECT_NE(demo.find("turn 2: 25 prompt tokens, 12 from the cache"), std::string::npos) << demo;
  EXPECT_EQ(demo.find("DIFFERS"), std::string::npos) << demo;

  worker.Signal(SIGTERM);
  EXPECT_EQ(worker.Wait(seconds(30)), 0) << worker.Stderr();
  EXPECT_NE(worker.Stderr().find("drained: left the coordinator"), std::string::npos)
      << worker.Stderr();
  coordinator.Signal(SIGTERM);
  EXPECT_EQ(coordinator.Wait(seconds(10)), 0) << coordinator.Stderr();
}

TEST(KvtierCliTest, HelpAndVersion) {
  std::string help;
  EXPECT_EQ(testing::RunCommand(kKvtier + " up --help", &help), 0);
  for (const char* expected :
       {"--metrics-port", "--data-dir", "KVTIER_METRICS_PORT", "Examples:"}) {
    EXPECT_NE(help.find(expected), std::string::npos) << expected;
  }
  std::string version;
  EXPECT_EQ(testing::RunCommand(kKvtier + " version", &version), 0);
  EXPECT_NE(version.find("kvtier 0."), std::string::npos) << version;
  EXPECT_EQ(testing::RunCommand(kKvtier, nullptr), 2) << "a subcommand is required";
}

}  // namespace
}  // namespace kvtier
