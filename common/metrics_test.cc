#include "common/metrics.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <unistd.h>

namespace kvtier {
namespace {

TEST(MetricsTest, CounterAndGaugeExposition) {
  MetricsRegistry registry;
  CounterFamily* hits = *registry.AddCounter("kvtier_hits_total", "Lookup hits by tier.", {"tier"});
  GaugeFamily* blocks = *registry.AddGauge("kvtier_index_blocks", "Blocks in the index.");
  hits->WithLabels({"gpu"}).Inc(3);
  hits->WithLabels({"disk"}).Inc();
  blocks->WithLabels({}).Set(1.5e6);
  EXPECT_EQ(registry.Exposition(),
            "# HELP kvtier_hits_total Lookup hits by tier.\n"
            "# TYPE kvtier_hits_total counter\n"
            "kvtier_hits_total{tier=\"disk\"} 1\n"
            "kvtier_hits_total{tier=\"gpu\"} 3\n"
            "# HELP kvtier_index_blocks Blocks in the index.\n"
            "# TYPE kvtier_index_blocks gauge\n"
            "kvtier_index_blocks 1500000\n");
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithInfAndLeInclusive) {
  MetricsRegistry registry;
  HistogramFamily* latency = *registry.AddHistogram("kvtier_lookup_seconds", "Lookup latency.",
                                                    {0.001, 0.01, 0.1}, {"role"});
  Histogram& h = latency->WithLabels({"coordinator"});
  h.Observe(0.0005);  // bucket 0.001
  h.Observe(0.001);   // le is inclusive: bucket 0.001
  h.Observe(0.05);    // bucket 0.1
  h.Observe(7);       // +Inf only
  EXPECT_EQ(registry.Exposition(),
            "# HELP kvtier_lookup_seconds Lookup latency.\n"
            "# TYPE kvtier_lookup_seconds histogram\n"
            "kvtier_lookup_seconds_bucket{role=\"coordinator\",le=\"0.001\"} 2\n"
            "kvtier_lookup_seconds_bucket{role=\"coordinator\",le=\"0.01\"} 2\n"
            "kvtier_lookup_seconds_bucket{role=\"coordinator\",le=\"0.1\"} 3\n"
            "kvtier_lookup_seconds_bucket{role=\"coordinator\",le=\"+Inf\"} 4\n"
            "kvtier_lookup_seconds_sum{role=\"coordinator\"} 7.0515\n"
            "kvtier_lookup_seconds_count{role=\"coordinator\"} 4\n");
}

TEST(MetricsTest, EscapesHelpAndLabelValues) {
  MetricsRegistry registry;
  CounterFamily* c =
      *registry.AddCounter("kvtier_odd_total", "Back\\slash and\nnewline.", {"path"});
  c->WithLabels({"a\"b\\c\nd"}).Inc();
  EXPECT_EQ(registry.Exposition(),
            "# HELP kvtier_odd_total Back\\\\slash and\\nnewline.\n"
            "# TYPE kvtier_odd_total counter\n"
            "kvtier_odd_total{path=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST(MetricsTest, RejectsBadNamesAndDuplicates) {
  MetricsRegistry registry;
  EXPECT_EQ(registry.AddCounter("kvtier_hits", "no suffix").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddGauge("kvtier_used_total", "suffix on a gauge").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddGauge("Kvtier-Bad", "bad characters").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddGauge("kvtier_x", "reserved label", {"__name"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddHistogram("kvtier_h", "le label", {1.0}, {"le"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddHistogram("kvtier_h", "unsorted", {2.0, 1.0}).status().code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(registry.AddGauge("kvtier_once", "first").ok());
  EXPECT_EQ(registry.AddCounter("kvtier_once", "second").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddGauge("kvtier_once", "second").status().code(), StatusCode::kAlreadyExists);
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry registry;
  CounterFamily* ops = *registry.AddCounter("kvtier_ops_total", "Ops.", {"thread"});
  HistogramFamily* sizes = *registry.AddHistogram("kvtier_sizes", "Sizes.", {10, 100});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      Counter& shared = ops->WithLabels({"all"});
      Histogram& h = sizes->WithLabels({});
      for (int i = 0; i < 10000; ++i) {
        shared.Inc();
        h.Observe(i % 200);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ops->WithLabels({"all"}).Value(), 40000);
  EXPECT_EQ(sizes->WithLabels({}).Read().cumulative_counts.back(), 40000u);
}

// promtool (from Debian's prometheus package, installed by scripts/install-deps.sh) is the
// reference parser and linter for the text format.
TEST(MetricsTest, PromtoolAcceptsExposition) {
  ASSERT_EQ(std::system("command -v promtool >/dev/null"), 0)
      << "promtool is missing: run scripts/install-deps.sh (Debian package prometheus)";
  MetricsRegistry registry;
  (*registry.AddCounter("kvtier_requests_total", "Requests \"quoted\" \\ back.",
                        {"method", "code"}))
      ->WithLabels({"lookup", "ok"})
      .Inc(12);
  (*registry.AddGauge("kvtier_pool_used_ratio", "Used fraction of the pool.", {"pool"}))
      ->WithLabels({"a\nb"})
      .Set(0.25);
  HistogramFamily* h = *registry.AddHistogram("kvtier_rpc_duration_seconds", "RPC latency.",
                                              ExponentialBuckets(1e-6, 4, 8), {"method"});
  for (int i = 0; i < 100; ++i) h->WithLabels({"ping"}).Observe(i * 1e-5);
  char path[] = "/tmp/kvtier_metrics_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = registry.Exposition();
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  const std::string command = std::string("promtool check metrics < ") + path + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[512];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  const int rc = pclose(pipe);
  unlink(path);
  EXPECT_EQ(rc, 0) << output << "\n--- exposition ---\n" << text;
  EXPECT_EQ(output, "") << "promtool lint findings";
}

}  // namespace
}  // namespace kvtier
