#include "common/metrics.h"
#include "common/mutex.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <spdlog/spdlog.h>

namespace kvtier {
namespace {

bool IsNameChar(char c, bool first, bool allow_colon) {
  if ((c >= 'a' && c <= 'z') || c == '_' || (allow_colon && c == ':')) return true;
  return !first && c >= '0' && c <= '9';
}

bool IsValidName(std::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], i == 0, allow_colon)) return false;
  }
  return true;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Prometheus parses sample values with Go's strconv.ParseFloat; the shortest round-trip
// form of std::to_chars is accepted by it, and infinities are spelled +Inf/-Inf.
void AppendValue(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "NaN";
  } else if (std::isinf(value)) {
    out += value > 0 ? "+Inf" : "-Inf";
  } else {
    char buffer[32];
    auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
    out.append(buffer, ec == std::errc() ? end : buffer);
  }
}

void AppendEscaped(std::string& out, std::string_view text, bool escape_quotes) {
  for (char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && escape_quotes)
      out += "\\\"";
    else
      out += c;
  }
}

// name{a="x",b="y"} for the given label names and values, plus an optional extra pair.
void AppendSeries(std::string& out, std::string_view name,
                  const std::vector<std::string>& label_names,
                  const std::vector<std::string>& values, std::string_view extra_name = {},
                  std::string_view extra_value = {}) {
  out += name;
  if (label_names.empty() && extra_name.empty()) return;
  out += '{';
  bool first = true;
  auto pair = [&](std::string_view label, std::string_view value) {
    if (!first) out += ',';
    first = false;
    out += label;
    out += "=\"";
    AppendEscaped(out, value, /*escape_quotes=*/true);
    out += '"';
  };
  for (size_t i = 0; i < label_names.size(); ++i) pair(label_names[i], values[i]);
  if (!extra_name.empty()) pair(extra_name, extra_value);
  out += '}';
}

void AppendHeader(std::string& out, std::string_view name, std::string_view help,
                  std::string_view type) {
  out += "# HELP ";
  out += name;
  out += ' ';
  AppendEscaped(out, help, /*escape_quotes=*/false);
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

template <typename T>
void AppendScalarFamily(std::string& out, const MetricFamily<T>& family, std::string_view type) {
  AppendHeader(out, family.name(), family.help(), type);
  family.ForEach([&](const std::vector<std::string>& labels, const T& child) {
    AppendSeries(out, family.name(), family.label_names(), labels);
    out += ' ';
    AppendValue(out, child.Value());
    out += '\n';
  });
}

void AppendHistogramFamily(std::string& out, const HistogramFamily& family) {
  AppendHeader(out, family.name(), family.help(), "histogram");
  const std::string bucket_name = family.name() + "_bucket";
  family.ForEach([&](const std::vector<std::string>& labels, const Histogram& child) {
    const Histogram::Snapshot snap = child.Read();
    const std::vector<double>& bounds = child.upper_bounds();
    for (size_t i = 0; i < snap.cumulative_counts.size(); ++i) {
      std::string le;
      AppendValue(le, i < bounds.size() ? bounds[i] : INFINITY);
      AppendSeries(out, bucket_name, family.label_names(), labels, "le", le);
      out += ' ' + std::to_string(snap.cumulative_counts[i]) + '\n';
    }
    AppendSeries(out, family.name() + "_sum", family.label_names(), labels);
    out += ' ';
    AppendValue(out, snap.sum);
    out += '\n';
    AppendSeries(out, family.name() + "_count", family.label_names(), labels);
    out += ' ' + std::to_string(snap.cumulative_counts.back()) + '\n';
  });
}

}  // namespace

Histogram::Histogram(std::span<const double> upper_bounds)
    : upper_bounds_(upper_bounds.begin(), upper_bounds.end()),
      counts_(new std::atomic<uint64_t>[upper_bounds.size() + 1]) {
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  // Bucket i counts values <= upper_bounds_[i] (Prometheus "le" semantics).
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot snap;
  snap.cumulative_counts.resize(upper_bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    snap.cumulative_counts[i] = running;
  }
  snap.sum = sum_.load(std::memory_order_relaxed);
  return snap;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  bounds.reserve(static_cast<size_t>(std::max(count, 0)));
  for (int i = 0; i < count; ++i, start *= factor) bounds.push_back(start);
  return bounds;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  std::vector<double> bounds;
  bounds.reserve(static_cast<size_t>(std::max(count, 0)));
  for (int i = 0; i < count; ++i) bounds.push_back(start + width * i);
  return bounds;
}

template <typename T>
MetricFamily<T>::MetricFamily(std::string name, std::string help,
                              std::vector<std::string> label_names,
                              std::vector<double> upper_bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      upper_bounds_(std::move(upper_bounds)) {}

template <typename T>
T& MetricFamily<T>::WithLabels(std::initializer_list<std::string_view> values) {
  return Get(std::vector<std::string>(values.begin(), values.end()));
}

template <typename T>
T& MetricFamily<T>::WithLabels(std::span<const std::string> values) {
  return Get(std::vector<std::string>(values.begin(), values.end()));
}

template <typename T>
T& MetricFamily<T>::Get(std::vector<std::string> values) {
  if (values.size() != label_names_.size()) {
    // A programming error in the caller, not an input error: the label set is fixed in code.
    spdlog::critical("metric {} takes {} label values, got {}", name_, label_names_.size(),
                     values.size());
    std::abort();
  }
  MutexLock lock(mu_);
  auto& slot = children_[std::move(values)];
  if (!slot) {
    if constexpr (std::is_same_v<T, Histogram>) {
      slot = std::make_unique<Histogram>(upper_bounds_);
    } else {
      slot = std::make_unique<T>();
    }
  }
  return *slot;
}

template class MetricFamily<Counter>;
template class MetricFamily<Gauge>;
template class MetricFamily<Histogram>;

Status MetricsRegistry::CheckNew(std::string_view name, MetricType type,
                                 const std::vector<std::string>& labels) const {
  const std::string quoted = "metric \"" + std::string(name) + "\"";
  if (!IsValidName(name, /*allow_colon=*/true)) {
    return InvalidArgumentError(quoted + ": names must match [a-z_:][a-z0-9_:]*");
  }
  const bool is_total = EndsWith(name, "_total");
  if (type == MetricType::kCounter && !is_total) {
    return InvalidArgumentError(quoted + ": counter names must end in _total");
  }
  if (type != MetricType::kCounter && is_total) {
    return InvalidArgumentError(quoted + ": only counter names may end in _total");
  }
  for (std::string_view suffix : {"_bucket", "_count", "_sum"}) {
    if (EndsWith(name, suffix)) {
      return InvalidArgumentError(quoted + ": names may not end in " + std::string(suffix));
    }
  }
  for (const std::string& label : labels) {
    if (!IsValidName(label, /*allow_colon=*/false) || label.starts_with("__")) {
      return InvalidArgumentError(quoted + ": label \"" + label +
                                  "\" must match [a-z_][a-z0-9_]* and not start with __");
    }
    if (type == MetricType::kHistogram && label == "le") {
      return InvalidArgumentError(quoted + ": label \"le\" is reserved for histogram buckets");
    }
  }
  for (const Entry& entry : families_) {
    const std::string* existing = entry.counter ? &entry.counter->name()
                                  : entry.gauge ? &entry.gauge->name()
                                                : &entry.histogram->name();
    if (*existing == name) return AlreadyExistsError(quoted + " is already registered");
  }
  return Status::Ok();
}

Result<CounterFamily*> MetricsRegistry::AddCounter(std::string name, std::string help,
                                                   std::vector<std::string> label_names) {
  MutexLock lock(mu_);
  KVTIER_RETURN_IF_ERROR(CheckNew(name, MetricType::kCounter, label_names));
  Entry entry{
      MetricType::kCounter,
      std::make_unique<CounterFamily>(std::move(name), std::move(help), std::move(label_names)),
      nullptr, nullptr};
  CounterFamily* family = entry.counter.get();
  families_.push_back(std::move(entry));
  return family;
}

Result<GaugeFamily*> MetricsRegistry::AddGauge(std::string name, std::string help,
                                               std::vector<std::string> label_names) {
  MutexLock lock(mu_);
  KVTIER_RETURN_IF_ERROR(CheckNew(name, MetricType::kGauge, label_names));
  Entry entry{
      MetricType::kGauge, nullptr,
      std::make_unique<GaugeFamily>(std::move(name), std::move(help), std::move(label_names)),
      nullptr};
  GaugeFamily* family = entry.gauge.get();
  families_.push_back(std::move(entry));
  return family;
}

Result<HistogramFamily*> MetricsRegistry::AddHistogram(std::string name, std::string help,
                                                       std::vector<double> upper_bounds,
                                                       std::vector<std::string> label_names) {
  for (size_t i = 0; i < upper_bounds.size(); ++i) {
    if (!std::isfinite(upper_bounds[i]) || (i > 0 && upper_bounds[i] <= upper_bounds[i - 1])) {
      return InvalidArgumentError("histogram \"" + name +
                                  "\": bucket bounds must be finite and strictly increasing");
    }
  }
  MutexLock lock(mu_);
  KVTIER_RETURN_IF_ERROR(CheckNew(name, MetricType::kHistogram, label_names));
  Entry entry{MetricType::kHistogram, nullptr, nullptr,
              std::make_unique<HistogramFamily>(std::move(name), std::move(help),
                                                std::move(label_names), std::move(upper_bounds))};
  HistogramFamily* family = entry.histogram.get();
  families_.push_back(std::move(entry));
  return family;
}

std::string MetricsRegistry::Exposition() const {
  std::string out;
  MutexLock lock(mu_);
  for (const Entry& entry : families_) {
    switch (entry.type) {
      case MetricType::kCounter: AppendScalarFamily(out, *entry.counter, "counter"); break;
      case MetricType::kGauge: AppendScalarFamily(out, *entry.gauge, "gauge"); break;
      case MetricType::kHistogram: AppendHistogramFamily(out, *entry.histogram); break;
    }
  }
  return out;
}

}  // namespace kvtier
