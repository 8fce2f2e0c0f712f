#include "services/coordinator/engines/engine_discovery.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "common/mutex.h"

namespace kvtier::coordinator {
namespace {

EngineSource Fleet(std::string events = "tcp://vllm.ns.svc.cluster.local:5557",
                   std::string replay = "tcp://vllm.ns.svc.cluster.local:5558") {
  return EngineSource{.name = "vllm",
                      .events = std::move(events),
                      .replay = std::move(replay),
                      .space = {.model = "llama", .tokens_per_block = 16},
                      .tenant = "team-a",
                      .discover = true};
}

std::vector<std::string> Names(const std::vector<EngineSource>& engines) {
  std::vector<std::string> names;
  for (const EngineSource& e : engines) names.push_back(e.name);
  return names;
}

TEST(ExpandEngineSourcesTest, EachAddressOfTheHostIsAnEngineOfItsOwn) {
  const EngineSource plain{.name = "sglang-0", .events = "tcp://10.0.0.9:5557"};
  const std::vector<EngineSource> sources = {Fleet(), plain};
  const auto expanded = ExpandEngineSources(
      sources, {{"vllm.ns.svc.cluster.local", {"10.0.0.11", "fd00::7"}}});
  ASSERT_TRUE(expanded.ok()) << expanded.status();
  ASSERT_EQ(Names(*expanded),
            (std::vector<std::string>{"vllm-10.0.0.11", "vllm-fd00::7", "sglang-0"}));
  const EngineSource& v4 = (*expanded)[0];
  EXPECT_EQ(v4.events, "tcp://10.0.0.11:5557");
  EXPECT_EQ(v4.replay, "tcp://10.0.0.11:5558");
  EXPECT_FALSE(v4.discover);
  EXPECT_EQ(v4.tenant, "team-a");
  EXPECT_EQ(v4.space.model, "llama");
  EXPECT_EQ((*expanded)[1].events, "tcp://[fd00::7]:5557");
  EXPECT_EQ((*expanded)[1].replay, "tcp://[fd00::7]:5558");
  EXPECT_EQ((*expanded)[2].events, plain.events);
}

TEST(ExpandEngineSourcesTest, AHostWithoutAddressesHasNoEnginesAndNoReplayIsKept) {
  const std::vector<EngineSource> sources = {Fleet("tcp://vllm:5557", "")};
  auto none = ExpandEngineSources(sources, {});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  auto one = ExpandEngineSources(sources, {{"vllm", {"10.1.2.3"}}});
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].replay, "");
}

TEST(ExpandEngineSourcesTest, AReplayOnAnotherHostIsRefusedByName) {
  const std::vector<EngineSource> sources = {Fleet("tcp://vllm:5557", "tcp://other:5558")};
  const auto expanded = ExpandEngineSources(sources, {{"vllm", {"10.1.2.3"}}});
  ASSERT_EQ(expanded.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(expanded.status().message().find("\"other\""), std::string::npos)
      << expanded.status();
  EXPECT_NE(expanded.status().message().find("engine \"vllm\""), std::string::npos);
}

TEST(EndpointHostTest, TakesTheHostOfATcpEndpointOnly) {
  EXPECT_EQ(*EndpointHost("tcp://vllm.ns:5557"), "vllm.ns");
  EXPECT_EQ(*EndpointHost("tcp://[fd00::1]:5557"), "fd00::1");
  for (const char* bad : {"ipc:///tmp/x", "tcp://vllm", "tcp://:5557", "tcp://[fd00::1:5557"}) {
    EXPECT_EQ(EndpointHost(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ResolveHostTest, ResolvesLocalhostAndFailsAnInvalidName) {
  const auto local = ResolveHost("localhost");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_NE(std::find(local->begin(), local->end(), "127.0.0.1"), local->end());
  // .invalid never resolves (RFC 6761); offline, the resolver may say kUnavailable.
  EXPECT_FALSE(ResolveHost("kvtier-test.invalid").ok());
}

// A DNS server whose answers the test sets, and the engine lists the discovery applied.
class EngineDiscoveryTest : public ::testing::Test {
 protected:
  void SetAnswer(Result<std::vector<std::string>> answer) {
    MutexLock lock(mu_);
    answer_ = std::move(answer);
  }
  // Waits (up to 10 s) until `done` holds for the applied lists.
  bool WaitFor(std::function<bool(const std::vector<std::vector<EngineSource>>&)> done) {
    MutexLock lock(mu_);
    return changed_.WaitFor(lock, std::chrono::seconds(10),
                            [&]() KVTIER_REQUIRES(mu_) { return done(applied_); });
  }
  size_t Resolutions() {
    MutexLock lock(mu_);
    return resolutions_;
  }
  std::vector<std::vector<EngineSource>> Applied() {
    MutexLock lock(mu_);
    return applied_;
  }

  EngineDiscoveryOptions Options(std::chrono::milliseconds interval) {
    return EngineDiscoveryOptions{
        .sources = {Fleet()},
        .apply =
            [this](std::vector<EngineSource> engines) {
              MutexLock lock(mu_);
              applied_.push_back(std::move(engines));
              changed_.NotifyAll();
              return Status::Ok();
            },
        .resolve =
            [this](const std::string& host) -> Result<std::vector<std::string>> {
              MutexLock lock(mu_);
              EXPECT_EQ(host, "vllm.ns.svc.cluster.local");
              ++resolutions_;
              changed_.NotifyAll();
              return answer_;
            },
        .interval = interval,
        .registry = &registry_};
  }

  MetricsRegistry registry_;
  Mutex mu_;
  CondVar changed_;
  Result<std::vector<std::string>> answer_ KVTIER_GUARDED_BY(mu_) =
      std::vector<std::string>{"10.0.0.1"};
  size_t resolutions_ KVTIER_GUARDED_BY(mu_) = 0;
  std::vector<std::vector<EngineSource>> applied_ KVTIER_GUARDED_BY(mu_);
};

TEST_F(EngineDiscoveryTest, CreateAppliesTheFirstResolutionBeforeItReturns) {
  auto discovery = EngineDiscovery::Create(Options(std::chrono::hours(1)));
  ASSERT_TRUE(discovery.ok()) << discovery.status();
  const auto applied = Applied();
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(Names(applied[0]), std::vector<std::string>{"vllm-10.0.0.1"});
  EXPECT_NE(registry_.Exposition().find("kvtier_engine_discovered_instances 1"), std::string::npos)
      << registry_.Exposition();
}

TEST_F(EngineDiscoveryTest, PodsThatComeAndGoAreAppliedAndAnUnchangedAnswerIsNot) {
  auto discovery = EngineDiscovery::Create(Options(std::chrono::milliseconds(1)));
  ASSERT_TRUE(discovery.ok()) << discovery.status();
  const size_t before = Resolutions();
  {
    MutexLock lock(mu_);
    ASSERT_TRUE(changed_.WaitFor(lock, std::chrono::seconds(10),
                                 [&]() KVTIER_REQUIRES(mu_) { return resolutions_ >= before + 5; }));
  }
  EXPECT_EQ(Applied().size(), 1u) << "the same addresses again change nothing";

  SetAnswer(std::vector<std::string>{"10.0.0.1", "10.0.0.2"});
  ASSERT_TRUE(WaitFor([](const auto& a) { return a.size() == 2; }));
  EXPECT_EQ(Names(Applied()[1]), (std::vector<std::string>{"vllm-10.0.0.1", "vllm-10.0.0.2"}));

  SetAnswer(NotFoundError("no such host"));  // the Service scaled to zero
  ASSERT_TRUE(WaitFor([](const auto& a) { return a.size() == 3; }));
  EXPECT_TRUE(Applied()[2].empty());
}

TEST_F(EngineDiscoveryTest, AFailingDnsServerKeepsTheLastAddresses) {
  auto discovery = EngineDiscovery::Create(Options(std::chrono::milliseconds(1)));
  ASSERT_TRUE(discovery.ok()) << discovery.status();
  SetAnswer(UnavailableError("timed out"));
  const size_t before = Resolutions();
  {
    MutexLock lock(mu_);
    ASSERT_TRUE(changed_.WaitFor(lock, std::chrono::seconds(10),
                                 [&]() KVTIER_REQUIRES(mu_) { return resolutions_ >= before + 5; }));
  }
  const auto applied = Applied();
  ASSERT_EQ(applied.size(), 1u) << "no engine left the list";
  EXPECT_EQ(Names(applied[0]), std::vector<std::string>{"vllm-10.0.0.1"});
  EXPECT_NE(registry_.Exposition().find(
                "kvtier_engine_discovery_resolutions_total{result=\"error\"}"),
            std::string::npos);
}

TEST_F(EngineDiscoveryTest, AReloadAppliesAtOnceAndABadSourceChangesNothing) {
  auto discovery = EngineDiscovery::Create(Options(std::chrono::hours(1)));
  ASSERT_TRUE(discovery.ok()) << discovery.status();
  const EngineSource plain{.name = "sglang-0", .events = "tcp://10.0.0.9:5557"};
  ASSERT_TRUE((*discovery)->SetSources({Fleet(), plain}).ok());
  auto applied = Applied();
  ASSERT_EQ(applied.size(), 2u);
  EXPECT_EQ(Names(applied[1]), (std::vector<std::string>{"vllm-10.0.0.1", "sglang-0"}));

  const Status bad = (*discovery)->SetSources({Fleet("tcp://vllm.ns.svc.cluster.local:5557",
                                                     "tcp://elsewhere:5558")});
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad;
  EXPECT_EQ(Applied().size(), 2u);
}

TEST_F(EngineDiscoveryTest, AnApplyThatFailsFailsCreate) {
  EngineDiscoveryOptions options = Options(std::chrono::hours(1));
  options.apply = [](std::vector<EngineSource>) { return InvalidArgumentError("two of a name"); };
  EXPECT_EQ(EngineDiscovery::Create(std::move(options)).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::coordinator
