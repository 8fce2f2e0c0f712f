// deploy/ checked offline, as CI runs it: the Kubernetes overlays render and validate
// against the API schemas (a misspelt field fails), the configuration they mount is one
// kvtier accepts, promtool passes the scrape configuration, rules and rule tests, the
// dashboard and rules query only metrics kvtier exports, and a real Prometheus server
// scrapes a running `kvtier up`, finds every role and evaluates every dashboard query.
#include <signal.h>

#include <cctype>
#include <chrono>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/testing/test_util.h"

namespace kvtier {
namespace {

using std::chrono::seconds;
using testing::ChildProcess;
using testing::RunCommand;

const std::string kSource = KVTIER_SOURCE_DIR;
const std::string kKvtier = std::string(KVTIER_BIN_DIR) + "/kvtier";
const std::string kDeploy = kSource + "/deploy";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::set<std::string> Matches(const std::string& text, const std::string& pattern, int group = 0) {
  std::set<std::string> found;
  const std::regex re(pattern);
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it)
    found.insert((*it)[group].str());
  return found;
}

// Starts `kvtier up` with `extra` flags, its metrics on `metrics_port` and its RPC on
// ports the kernel picks.
void StartUp(const testing::TempDir& dir, const testing::ReservedPort& metrics_port,
             std::unique_ptr<ChildProcess>& up, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {kKvtier,
                                   "up",
                                   "--data-dir",
                                   dir.File("data"),
                                   "--metrics-port",
                                   std::to_string(metrics_port.port()),
                                   "--coordinator-listen",
                                   "127.0.0.1:0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  up = std::make_unique<ChildProcess>(argv, dir.path());
  EXPECT_TRUE(up->WaitForOutput("Stop with Ctrl-C", seconds(20))) << up->Stdout() << up->Stderr();
}

// The PromQL of every target of the Grafana dashboard, unescaped from its JSON strings
// (PromQL needs no escapes there but \" and \\, which is all this undoes).
std::vector<std::string> DashboardQueries() {
  const std::string dashboard = ReadFile(kDeploy + "/grafana/kvtier-dashboard.json");
  const std::regex expr("\"expr\": \"((?:[^\"\\\\]|\\\\.)*)\"");
  std::vector<std::string> queries;
  for (std::sregex_iterator it(dashboard.begin(), dashboard.end(), expr), end; it != end; ++it) {
    std::string query;
    const std::string escaped = (*it)[1].str();
    for (size_t i = 0; i < escaped.size(); ++i)
      query += escaped[i] == '\\' ? escaped[++i] : escaped[i];
    queries.push_back(std::move(query));
  }
  return queries;
}

std::string Curl(const std::string& url) {
  std::string out;
  EXPECT_EQ(RunCommand("curl -sS --max-time 5 '" + url + "'", &out), 0) << url << ": " << out;
  return out;
}

class OverlayTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OverlayTest, RendersAndValidatesAgainstTheKubernetesSchemas) {
  testing::TempDir dir;
  const std::string rendered = dir.File("rendered.yaml");
  std::string out;
  ASSERT_EQ(
      RunCommand("kubectl kustomize " + kDeploy + "/k8s/overlays/" + GetParam() + " > " + rendered,
                 &out),
      0)
      << "kubectl kustomize (is kubectl installed?): " << out;
  ASSERT_EQ(RunCommand("node " + kDeploy + "/validate/validate.mjs " + rendered, &out), 0) << out;
  EXPECT_NE(out.find("objects valid"), std::string::npos) << out;
  const std::string manifests = ReadFile(rendered);
  for (const char* expected :
       {"kind: Deployment", "kind: ConfigMap", "kind: PodDisruptionBudget", "kind: ServiceMonitor",
        "path: /healthz", "path: /readyz", "enableServiceLinks: false"}) {
    EXPECT_NE(manifests.find(expected), std::string::npos) << expected;
  }
  // Host pools are shm_open objects in /dev/shm (common/shared_pool_memory.h), 0600: the
  // worker shares the node's IPC namespace (and so its /dev/shm) and runs as one known user,
  // as deploy/README.md tells inference pods to; no Unix socket hands them over.
  const size_t daemon_set = manifests.find("kind: DaemonSet");
  if (daemon_set != std::string::npos) {  // the worker's: the one DaemonSet
    const size_t start = manifests.rfind("---", daemon_set);
    const size_t at = start == std::string::npos ? 0 : start;
    const std::string spec = manifests.substr(at, manifests.find("\n---", daemon_set) - at);
    EXPECT_NE(spec.find("hostIPC: true"), std::string::npos) << spec;
    EXPECT_NE(spec.find("runAsUser: 10001"), std::string::npos) << spec;
    EXPECT_EQ(spec.find("/run/kvtier"), std::string::npos) << spec;
  }
  if (GetParam() == "dev") {
    EXPECT_NE(manifests.find("kind: Secret"), std::string::npos) << "dev generates its tokens";
    EXPECT_NE(manifests.find("- args:\n        - up\n"), std::string::npos)
        << "dev runs every role in one pod";
  }
  if (GetParam() == "gpu" || GetParam() == "fleet") {
    EXPECT_EQ(manifests.find("kind: Secret"), std::string::npos)
        << "production tokens never come from git";
    for (const char* expected :
         {"kind: DaemonSet", "kind: StatefulSet", "nvidia.com/gpu: 1", "hostIPC: true",
          "volumeClaimTemplates", "kind: PodMonitor", "image: kvtier/kvtier:0.1.0-cuda"}) {
      EXPECT_NE(manifests.find(expected), std::string::npos) << expected;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Overlays, OverlayTest, ::testing::Values("dev", "gpu", "fleet"));


// The validator must fail on what it exists to catch: a misspelt field, at any depth.
TEST(ManifestValidatorTest, AMisspeltFieldFailsNamingIt) {
  testing::TempDir dir;
  std::string out;
  ASSERT_EQ(RunCommand("kubectl kustomize " + kDeploy +
                           "/k8s/overlays/gpu | sed 's/terminationGracePeriodSeconds:/" +
                           "terminationGracePeriodSecond:/' > " + dir.File("typo.yaml"),
                       &out),
            0)
      << out;
  EXPECT_EQ(RunCommand("node " + kDeploy + "/validate/validate.mjs " + dir.File("typo.yaml"), &out),
            1)
      << out;
  EXPECT_NE(out.find("terminationGracePeriodSecond"), std::string::npos) << out;
  // And a wrong type: a port given as text.
  ASSERT_EQ(RunCommand("kubectl kustomize " + kDeploy +
                           "/k8s/overlays/dev | sed 's/port: 7400/port: \"7400x\"/' > " +
                           dir.File("type.yaml"),
                       &out),
            0);
  EXPECT_EQ(RunCommand("node " + kDeploy + "/validate/validate.mjs " + dir.File("type.yaml"), &out),
            1)
      << out;
  EXPECT_NE(out.find("Service/kvtier-coordinator"), std::string::npos) << out;
}

// `kvtier up` with `args` starts (its banner names the dev tokens' tenant) and stops
// cleanly on SIGTERM.
void ExpectUpStartsAndStops(const std::vector<std::string>& args) {
  testing::TempDir dir;
  const testing::ReservedPort metrics_port;
  std::unique_ptr<ChildProcess> up;
  StartUp(dir, metrics_port, up, args);
  EXPECT_NE(up->Stdout().find("tenant"), std::string::npos) << up->Stdout() << up->Stderr();
  up->Signal(SIGTERM);
  EXPECT_EQ(up->Wait(seconds(10)), 0) << up->Stderr();
}

// The ConfigMap's kvtier.yaml and the dev overlay's tokens file are what kvtier accepts.
TEST(DeployConfigTest, TheMountedConfigurationStartsKvtier) {
  ExpectUpStartsAndStops({"--config", kDeploy + "/k8s/base/kvtier.yaml", "--auth-token-file",
                          kDeploy + "/k8s/overlays/dev/tokens.yaml", "--store-host-cache-bytes",
                          "67108864", "--store-disk-bytes", "67108864"});
}

// The dev overlay's pod runs `kvtier up` with flags of its own on top of the mounted
// configuration (up.yaml's args): kvtier refuses an unknown flag, so a misspelt one
// would crash-loop the pod. Run that command line, the paths made local.
TEST(DeployConfigTest, TheDevOverlaysCommandLineStartsKvtier) {
  const std::string manifest = ReadFile(kDeploy + "/k8s/overlays/dev/up.yaml");
  std::smatch list;
  ASSERT_TRUE(std::regex_search(manifest, list, std::regex(R"(args: \[([^\]]*)\])"))) << manifest;
  std::vector<std::string> args;
  const std::string quoted = list[1].str();
  const std::regex item("\"([^\"]*)\"");
  for (std::sregex_iterator it(quoted.begin(), quoted.end(), item), end; it != end; ++it)
    args.push_back((*it)[1]);
  ASSERT_GE(args.size(), 3u) << quoted;
  ASSERT_EQ(args.front(), "up");
  args.erase(args.begin());
  for (std::string& arg : args) {
    if (arg == "/etc/kvtier/kvtier.yaml") arg = kDeploy + "/k8s/base/kvtier.yaml";
  }
  args.insert(args.end(), {"--auth-token-file", kDeploy + "/k8s/overlays/dev/tokens.yaml"});
  ExpectUpStartsAndStops(args);
}

// The fleet overlay's coordinator follows the pods of a headless Service by DNS and opens
// the routing API; its settings (environment variables, each a flag's value) start kvtier.
// Offline the Service's name resolves to nothing: the coordinator runs with no engine.
TEST(DeployConfigTest, TheFleetOverlaysCoordinatorSettingsStartKvtier) {
  std::string rendered;
  ASSERT_EQ(RunCommand("kubectl kustomize " + kDeploy + "/k8s/overlays/fleet", &rendered), 0)
      << rendered;
  const size_t service = rendered.find("name: kvtier-engines");
  ASSERT_NE(service, std::string::npos) << rendered;
  EXPECT_NE(rendered.find("clusterIP: None", service), std::string::npos)
      << "a headless Service: one address per pod";
  std::vector<std::string> flags;
  for (const char* env : {"KVTIER_COORDINATOR_ENGINES", "KVTIER_COORDINATOR_HTTP_LISTEN",
                          "KVTIER_COORDINATOR_ENGINE_DISCOVERY_INTERVAL_MS"}) {
    std::smatch value;
    ASSERT_TRUE(std::regex_search(rendered, value,
                                  std::regex(std::string("- name: ") + env + "\n +value: \"?([^\"\n]*)")))
        << env;
    std::string flag = std::string(env).substr(std::strlen("KVTIER_"));
    for (char& c : flag) c = c == '_' ? '-' : static_cast<char>(std::tolower(c));
    flags.push_back("--" + flag);
    flags.push_back(value[1].str());
  }
  EXPECT_NE(flags[1].find("discovery=dns"), std::string::npos) << flags[1];
  EXPECT_NE(flags[1].find("events=tcp://kvtier-engines:5557"), std::string::npos) << flags[1];
  flags[3] = "127.0.0.1:0";  // the routing API's 0.0.0.0:7480, on a port the kernel picks
  testing::TempDir dir;
  const std::string tokens = dir.File("tokens.yaml");
  std::ofstream(tokens) << "tenants:\n  - {name: team-a, token: \"fleet-test-token-0123456789abcdef\"}\n";
  flags.insert(flags.end(), {"--auth-token-file", tokens, "--config",
                             kDeploy + "/k8s/base/kvtier.yaml", "--store-host-cache-bytes",
                             "67108864", "--store-disk-bytes", "67108864"});
  ExpectUpStartsAndStops(flags);
}

TEST(PromtoolTest, ConfigRulesAndRuleTestsPass) {
  std::string out;
  const std::string dir = kDeploy + "/prometheus";
  EXPECT_EQ(RunCommand("promtool check config " + dir + "/prometheus.yml", &out), 0) << out;
  EXPECT_EQ(RunCommand("promtool check rules " + dir + "/kvtier.rules.yml", &out), 0) << out;
  EXPECT_EQ(RunCommand("cd " + dir + " && promtool test rules kvtier.rules.test.yml", &out), 0)
      << out;
  EXPECT_NE(out.find("SUCCESS"), std::string::npos) << out;
}

// Every kvtier_* metric the rules and the dashboard query is in a running kvtier's
// /metrics (`kvtier up`, and a `kvtier store` beside it for what only separate nodes
// export: the data stream's metrics), and every recording rule the dashboard uses is
// defined.
TEST(DeployMetricsTest, DashboardAndRulesQueryOnlyExportedMetrics) {
  testing::TempDir dir, store_dir;
  const testing::ReservedPort up_metrics;
  std::unique_ptr<ChildProcess> up;
  StartUp(dir, up_metrics, up, {"--auth-enabled", "false"});
  const uint16_t port = up_metrics.port();
  const std::set<std::string> coordinator_rpc = Matches(up->Stdout(), "\\n  rpc +(\\S+)", 1);
  ASSERT_EQ(coordinator_rpc.size(), 1u) << up->Stdout();
  const testing::ReservedPort store_metrics;
  const uint16_t store_port = store_metrics.port();
  // Named apart from up's own embedded store: node names are unique in a cluster.
  ChildProcess store({kKvtier,
                      "store",
                      "--auth-enabled",
                      "false",
                      "--store-listen",
                      "127.0.0.1:0",
                      "--node-name",
                      "metrics-store",
                      "--node-coordinator",
                      *coordinator_rpc.begin(),
                      "--metrics-port",
                      std::to_string(store_port),
                      "--metrics-bind",
                      "127.0.0.1",
                      "--data-dir",
                      dir.File("store"),
                      "--store-host-cache-bytes",
                      "1048576",
                      "--store-disk-bytes",
                      "4194304"},
                     store_dir.path());
  ASSERT_TRUE(store.WaitForOutput("Stop with Ctrl-C", seconds(20)))
      << store.Stdout() << store.Stderr();
  const std::string exposition =
      Curl("http://127.0.0.1:" + std::to_string(port) + "/metrics") +
      Curl("http://127.0.0.1:" + std::to_string(store_port) + "/metrics");
  const std::set<std::string> exported = Matches(exposition, "# TYPE (kvtier_[a-z0-9_]+) ", 1);
  const std::set<std::string> histograms =
      Matches(exposition, "# TYPE (kvtier_[a-z0-9_]+) histogram", 1);
  ASSERT_GT(exported.size(), 20u) << exposition;

  const std::string rules = ReadFile(kDeploy + "/prometheus/kvtier.rules.yml");
  const std::string dashboard = ReadFile(kDeploy + "/grafana/kvtier-dashboard.json");
  size_t checked = 0;
  for (const std::string& name : Matches(rules + dashboard, "kvtier_[a-z0-9_]+")) {
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string base =
          name.substr(0, name.size() - std::min(name.size(), std::strlen(suffix)));
      if (name.ends_with(suffix) && histograms.contains(base)) family = base;
    }
    EXPECT_TRUE(exported.contains(family)) << name << " is queried but kvtier does not export it";
    ++checked;
  }
  EXPECT_GT(checked, 15u);
  const std::set<std::string> recorded = Matches(rules, "record: (kvtier:[a-z0-9_:]+)", 1);
  for (const std::string& name : Matches(dashboard, "kvtier:[a-z0-9_:]+")) {
    EXPECT_TRUE(recorded.contains(name))
        << name << " is used by the dashboard but no rule records it";
  }
  store.Signal(SIGTERM);
  EXPECT_EQ(store.Wait(seconds(30)), 0) << store.Stderr();
  up->Signal(SIGTERM);
  EXPECT_EQ(up->Wait(seconds(10)), 0);
}

// A real Prometheus (Debian's) on loopback scrapes `kvtier up` every second for 15 s with
// kvtier's rules loaded; its HTTP API then has series for every role and healthy rules,
// and evaluates every query of the dashboard.
TEST(PrometheusScrapeTest, FindsEveryRoleOfARunningKvtier) {
  testing::TempDir dir;
  const testing::ReservedPort up_metrics, prometheus_web;
  std::unique_ptr<ChildProcess> up;
  StartUp(dir, up_metrics, up, {"--auth-enabled", "false"});
  const uint16_t metrics_port = up_metrics.port();
  const uint16_t prometheus_port = prometheus_web.port();
  ASSERT_TRUE(testing::WriteFile(dir.File("prometheus.yml"),
                                 "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                                 "rule_files: ['" +
                                     kDeploy +
                                     "/prometheus/kvtier.rules.yml']\n"
                                     "scrape_configs:\n"
                                     "  - job_name: kvtier\n"
                                     "    static_configs: [{targets: ['127.0.0.1:" +
                                     std::to_string(metrics_port) + "']}]\n"));
  ChildProcess prometheus({"/usr/bin/prometheus", "--config.file=" + dir.File("prometheus.yml"),
                           "--storage.tsdb.path=" + dir.File("tsdb"),
                           "--web.listen-address=127.0.0.1:" + std::to_string(prometheus_port)},
                          dir.path());
  const std::string api = "http://127.0.0.1:" + std::to_string(prometheus_port) + "/api/v1/";
  // Prometheus starts and scrapes every second: waited for, bounded, for a loaded machine
  // (a fixed sleep lost the race while the chaos soak ran beside it).
  std::string roles;
  testing::WaitUntil(
      [&] {
        roles.clear();
        if (RunCommand("curl -sS --max-time 5 '" + api + "query?query=kvtier_role_info'", &roles) ==
                0 &&
            roles.find("\"role\":\"store\"") != std::string::npos)
          return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        return false;
      },
      seconds(60));
  for (const char* role : {"coordinator", "worker", "store"}) {
    EXPECT_NE(roles.find(std::string("\"role\":\"") + role + "\""), std::string::npos)
        << role << ": " << roles;
  }
  const std::string up_series = Curl(api + "query?query=up");
  EXPECT_NE(up_series.find("\"value\":["), std::string::npos) << up_series;
  EXPECT_NE(up_series.find(",\"1\"]"), std::string::npos) << "the target is up: " << up_series;
  const std::string rules = Curl(api + "rules");
  EXPECT_NE(rules.find("\"name\":\"kvtier:block_hit_rate:ratio_rate5m\""), std::string::npos)
      << rules;
  EXPECT_EQ(rules.find("\"health\":\"err\""), std::string::npos) << rules;
  // Every query of the dashboard is one this Prometheus evaluates (a typo in PromQL fails).
  const std::vector<std::string> queries = DashboardQueries();
  EXPECT_GT(queries.size(), 20u);
  for (const std::string& query : queries) {
    ASSERT_TRUE(testing::WriteFile(dir.File("query"), query));
    std::string answer;
    EXPECT_EQ(RunCommand("curl -sS --max-time 5 -G --data-urlencode 'query@" + dir.File("query") +
                             "' '" + api + "query'",
                         &answer),
              0);
    EXPECT_NE(answer.find("\"status\":\"success\""), std::string::npos) << query << ": " << answer;
  }
  prometheus.Signal(SIGTERM);
  EXPECT_EQ(prometheus.Wait(seconds(15)), 0) << prometheus.Stderr();
  up->Signal(SIGTERM);
  EXPECT_EQ(up->Wait(seconds(10)), 0);
}

}  // namespace
}  // namespace kvtier
