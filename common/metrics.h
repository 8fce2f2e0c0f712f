// Metrics: counters, gauges and histograms with labels, exposed in the Prometheus text
// format 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// prometheus-cpp is not packaged for Debian 12, so this is a small, exact replacement
// for the part kvtier needs: no summaries, no timestamps, no protobuf format.
//
// Use: register a family once at start-up, resolve the labelled child once, keep the
// reference, and update it on the hot path (a relaxed atomic operation, no lock):
//
//   KVTIER_ASSIGN_OR_RETURN(auto* hits, registry.AddCounter("kvtier_hits_total",
//                                                            "Lookup hits.", {"tier"}));
//   Counter& gpu_hits = hits->WithLabels({"gpu"});
//   gpu_hits.Inc();
//
// Thread safety: every method of every class here is safe from any thread. Children are
// created under their family's mutex; updates are lock-free atomics. Exposition reads a
// consistent view of each histogram's buckets and count, not a global snapshot.
// Ownership: the Registry owns families, families own children; references stay valid
// for the Registry's lifetime.
//
// REQUIRES: WithLabels gets exactly as many values as the family has label names.
// REQUIRES: Counter::Inc gets a non-negative amount.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace kvtier {

class Counter {
 public:
  void Inc(double amount = 1.0) { value_.fetch_add(amount, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double amount) { value_.fetch_add(amount, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `upper_bounds`: strictly increasing, finite; +Inf is implicit.
  explicit Histogram(std::span<const double> upper_bounds);

  void Observe(double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative_counts;  // one per bound, then +Inf (== count)
    double sum = 0.0;
  };
  Snapshot Read() const;
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }

 private:
  std::vector<double> upper_bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, not cumulative; last = +Inf
  std::atomic<double> sum_{0.0};
};

// Bucket helpers: {start, start*factor, ...} count values; {start, start+width, ...}.
std::vector<double> ExponentialBuckets(double start, double factor, int count);
std::vector<double> LinearBuckets(double start, double width, int count);

enum class MetricType { kCounter, kGauge, kHistogram };

template <typename T>
class MetricFamily {
 public:
  MetricFamily(std::string name, std::string help, std::vector<std::string> label_names,
               std::vector<double> upper_bounds = {});

  T& WithLabels(std::initializer_list<std::string_view> values);
  T& WithLabels(std::span<const std::string> values);

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // Calls fn(label_values, child) for each child in label order.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    MutexLock lock(mu_);
    for (const auto& [labels, child] : children_) fn(labels, *child);
  }

 private:
  T& Get(std::vector<std::string> values);

  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const std::vector<double> upper_bounds_;  // histograms only
  mutable Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_ KVTIER_GUARDED_BY(mu_);
};

using CounterFamily = MetricFamily<Counter>;
using GaugeFamily = MetricFamily<Gauge>;
using HistogramFamily = MetricFamily<Histogram>;

class MetricsRegistry {
 public:
  // Names: [a-z_:][a-z0-9_:]*; counters end in _total, other types never do. Label names:
  // [a-z_][a-z0-9_]*, not starting with "__"; "le" is reserved for histogram buckets.
  // A name registered twice is kAlreadyExists.
  [[nodiscard]] Result<CounterFamily*> AddCounter(std::string name, std::string help,
                                                  std::vector<std::string> label_names = {});
  [[nodiscard]] Result<GaugeFamily*> AddGauge(std::string name, std::string help,
                                              std::vector<std::string> label_names = {});
  [[nodiscard]] Result<HistogramFamily*> AddHistogram(std::string name, std::string help,
                                                      std::vector<double> upper_bounds,
                                                      std::vector<std::string> label_names = {});

  // The text exposition format 0.0.4, families in registration order.
  std::string Exposition() const;

  static constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  Status CheckNew(std::string_view name, MetricType type,
                  const std::vector<std::string>& labels) const KVTIER_REQUIRES(mu_);

  struct Entry {
    MetricType type;
    std::unique_ptr<CounterFamily> counter;
    std::unique_ptr<GaugeFamily> gauge;
    std::unique_ptr<HistogramFamily> histogram;
  };
  mutable Mutex mu_;
  std::vector<Entry> families_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier
