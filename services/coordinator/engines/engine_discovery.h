// EngineDiscovery: engines found by DNS, as Kubernetes publishes the pods of a headless
// Service (one A or AAAA record per ready pod).
//
// An EngineSource with `discover` names a set of engines: the host of its `events`
// endpoint is resolved, and each address becomes an engine of its own, named
// "<name>-<address>", whose endpoints are the source's with the host replaced by the
// address (the replay endpoint must name the same host). Sources without `discover` pass
// through unchanged. The host is resolved again every `interval` on the discovery's
// thread; when the expanded list changes, `apply` gets it, and EngineFeed::Reconfigure
// does the rest (new pods are followed, gone ones leave the index).
//
// Failures: a host that does not exist (NXDOMAIN: a Service with no ready pods) has no
// engines; any other resolution error (a DNS server that does not answer) keeps the
// addresses of the last resolution, so that a blip in DNS drops no engine.
//
// Metrics: kvtier_engine_discovery_resolutions_total{result="ok|not_found|error"},
// kvtier_engine_discovered_instances (engines from discovery now).
//
// Thread safety: Create(), SetSources() and the destructor from one controlling thread;
// `apply` runs on the discovery's thread or in Create() / SetSources(), never two at once.
// Ownership: the registry and what `apply` and `resolve` capture outlive the discovery.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/status.h"
#include "services/coordinator/engines/engine_feed.h"

namespace kvtier::coordinator {

// The numeric addresses of `host` ("10.0.0.11", "fd00::1"), sorted and unique.
// kNotFound: the name does not exist or has no addresses; kUnavailable: resolution failed.
using HostResolver = std::function<Result<std::vector<std::string>>(const std::string& host)>;

// getaddrinfo(3), TCP addresses of both families.
[[nodiscard]] Result<std::vector<std::string>> ResolveHost(const std::string& host);

// The host of a tcp://host:port endpoint ("[fd00::1]" unbracketed). kInvalidArgument: not
// a tcp endpoint with a host and port.
[[nodiscard]] Result<std::string> EndpointHost(std::string_view endpoint);

// `sources` with each discovering one replaced by one engine per address of its host in
// `addresses` (a host missing from it: none). kInvalidArgument: a discovering source whose
// replay endpoint names another host.
[[nodiscard]] Result<std::vector<EngineSource>> ExpandEngineSources(
    std::span<const EngineSource> sources,
    const std::map<std::string, std::vector<std::string>>& addresses);

struct EngineDiscoveryOptions {
  std::vector<EngineSource> sources = {};
  // Receives the expanded list; an error is logged and the next resolution tries again.
  std::function<Status(std::vector<EngineSource>)> apply = {};  // required
  HostResolver resolve = ResolveHost;
  std::chrono::milliseconds interval{10000};
  MetricsRegistry* registry = nullptr;  // required
};

class EngineDiscovery {
 public:
  // Resolves every discovering host and applies the expansion before it returns (the
  // error of `apply`, or kInvalidArgument for a bad source, fails it); the thread starts
  // only where a source discovers.
  [[nodiscard]] static Result<std::unique_ptr<EngineDiscovery>> Create(
      EngineDiscoveryOptions options);
  ~EngineDiscovery();
  EngineDiscovery(const EngineDiscovery&) = delete;
  EngineDiscovery& operator=(const EngineDiscovery&) = delete;

  // Replaces the configured sources (a reload), resolves and applies as Create does;
  // nothing changes on error.
  [[nodiscard]] Status SetSources(std::vector<EngineSource> sources);

  class Impl;

 private:
  explicit EngineDiscovery(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::coordinator
