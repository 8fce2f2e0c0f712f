#include "services/coordinator/engines/engine_discovery.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <set>
#include <thread>

#include "common/mutex.h"
#include "common/thread_name.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace kvtier::coordinator {
namespace {

struct Endpoint {
  std::string host;
  std::string port;
};

Result<Endpoint> SplitTcpEndpoint(std::string_view endpoint) {
  const auto bad = [&](std::string_view why) {
    return InvalidArgumentError(fmt::format("endpoint \"{}\" {}", endpoint, why));
  };
  constexpr std::string_view kScheme = "tcp://";
  if (!endpoint.starts_with(kScheme)) return bad("is not tcp://host:port");
  const std::string_view rest = endpoint.substr(kScheme.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == rest.size())
    return bad("has no host:port");
  std::string_view host = rest.substr(0, colon);
  if (host.starts_with('[')) {
    if (!host.ends_with(']') || host.size() < 3) return bad("has an unclosed [ipv6] host");
    host = host.substr(1, host.size() - 2);
  }
  return Endpoint{std::string(host), std::string(rest.substr(colon + 1))};
}

std::string WithHost(const std::string& address, const std::string& port) {
  const bool v6 = address.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + address + "]" : address) + ":" + port;
}

// Expands one discovering source into its addresses' engines.
Status ExpandOne(const EngineSource& source, const std::vector<std::string>& addresses,
                 std::vector<EngineSource>& out) {
  KVTIER_ASSIGN_OR_RETURN(const Endpoint events, SplitTcpEndpoint(source.events));
  std::optional<Endpoint> replay;
  if (!source.replay.empty()) {
    KVTIER_ASSIGN_OR_RETURN(replay, SplitTcpEndpoint(source.replay));
    if (replay->host != events.host) {
      return InvalidArgumentError(
          fmt::format("engine \"{}\": with discovery its replay endpoint must name the events "
                      "endpoint's host \"{}\", not \"{}\"",
                      source.name, events.host, replay->host));
    }
  }
  for (const std::string& address : addresses) {
    EngineSource engine = source;
    engine.discover = false;
    engine.name = source.name + "-" + address;
    engine.events = WithHost(address, events.port);
    if (replay.has_value()) engine.replay = WithHost(address, replay->port);
    out.push_back(std::move(engine));
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::string>> ResolveHost(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc == EAI_NONAME || rc == EAI_NODATA)
    return NotFoundError(fmt::format("host \"{}\" has no addresses", host));
  if (rc != 0)
    return UnavailableError(fmt::format("resolving \"{}\": {}", host, gai_strerror(rc)));
  std::set<std::string> addresses;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[NI_MAXHOST];
    if (getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) == 0)
      addresses.insert(text);
  }
  freeaddrinfo(found);
  if (addresses.empty()) return NotFoundError(fmt::format("host \"{}\" has no addresses", host));
  return std::vector<std::string>(addresses.begin(), addresses.end());
}

Result<std::string> EndpointHost(std::string_view endpoint) {
  KVTIER_ASSIGN_OR_RETURN(Endpoint e, SplitTcpEndpoint(endpoint));
  return std::move(e.host);
}

Result<std::vector<EngineSource>> ExpandEngineSources(
    std::span<const EngineSource> sources,
    const std::map<std::string, std::vector<std::string>>& addresses) {
  static const std::vector<std::string> kNone;
  std::vector<EngineSource> out;
  for (const EngineSource& source : sources) {
    if (!source.discover) {
      out.push_back(source);
      continue;
    }
    KVTIER_ASSIGN_OR_RETURN(const std::string host, EndpointHost(source.events));
    const auto it = addresses.find(host);
    KVTIER_RETURN_IF_ERROR(ExpandOne(source, it == addresses.end() ? kNone : it->second, out));
  }
  return out;
}

class EngineDiscovery::Impl {
 public:
  explicit Impl(EngineDiscoveryOptions options) : options_(std::move(options)) {}
  ~Impl() { Stop(); }

  Status Start() {
    KVTIER_ASSIGN_OR_RETURN(CounterFamily * resolutions,
                            options_.registry->AddCounter(
                                "kvtier_engine_discovery_resolutions_total",
                                "DNS resolutions of discovered engines' hosts, by result",
                                {"result"}));
    ok_ = &resolutions->WithLabels({"ok"});
    not_found_ = &resolutions->WithLabels({"not_found"});
    error_ = &resolutions->WithLabels({"error"});
    KVTIER_ASSIGN_OR_RETURN(GaugeFamily * discovered,
                            options_.registry->AddGauge("kvtier_engine_discovered_instances",
                                                        "Engines found by discovery now"));
    discovered_ = &discovered->WithLabels({});
    return SetSources(options_.sources);
  }

  Status SetSources(std::vector<EngineSource> sources) {
    for (const EngineSource& s : sources) {
      if (s.discover) KVTIER_RETURN_IF_ERROR(EndpointHost(s.events).status());
    }
    MutexLock lock(refresh_mu_);
    KVTIER_RETURN_IF_ERROR(Refresh(sources, /*force=*/true));
    sources_ = std::move(sources);
    if (!thread_.joinable() && Discovers(sources_)) thread_ = std::thread([this] { Run(); });
    return Status::Ok();
  }

  // Waits for a resolution in flight (bounded by the resolver's timeouts).
  void Stop() {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    wake_.NotifyAll();
    if (thread_.joinable()) thread_.join();
  }

 private:
  static bool Discovers(const std::vector<EngineSource>& sources) {
    return std::any_of(sources.begin(), sources.end(),
                       [](const EngineSource& s) { return s.discover; });
  }

  void Run() {
    NameThisThread("kvt-discover");
    for (;;) {
      {
        MutexLock lock(mu_);
        if (wake_.WaitFor(lock, options_.interval, [&]() KVTIER_REQUIRES(mu_) { return stop_; }))
          return;
      }
      MutexLock lock(refresh_mu_);
      const Status status = Refresh(sources_, /*force=*/false);
      if (!status.ok()) spdlog::warn("engine discovery: {}", status.ToString());
    }
  }

  // The addresses of every discovering host of `sources`: a host that does not exist has
  // none; one that failed to resolve keeps its last ones.
  std::map<std::string, std::vector<std::string>> Resolve(
      const std::vector<EngineSource>& sources) KVTIER_REQUIRES(refresh_mu_) {
    std::set<std::string> hosts;
    for (const EngineSource& s : sources) {
      if (s.discover) hosts.insert(*EndpointHost(s.events));
    }
    std::map<std::string, std::vector<std::string>> addresses;
    for (const std::string& host : hosts) {
      Result<std::vector<std::string>> found = options_.resolve(host);
      if (found.ok()) {
        ok_->Inc();
        addresses[host] = *std::move(found);
      } else if (found.status().code() == StatusCode::kNotFound) {
        not_found_->Inc();
        addresses[host] = {};
      } else {
        error_->Inc();
        spdlog::warn("engine discovery: {} (its last addresses stay)", found.status().ToString());
        const auto last = last_addresses_.find(host);
        if (last != last_addresses_.end()) addresses[host] = last->second;
      }
    }
    return addresses;
  }

  // Resolves and applies the expansion of `sources`: always when `force`, else when an
  // address changed.
  Status Refresh(const std::vector<EngineSource>& sources, bool force)
      KVTIER_REQUIRES(refresh_mu_) {
    std::map<std::string, std::vector<std::string>> addresses = Resolve(sources);
    if (!force && addresses == last_addresses_) return Status::Ok();
    KVTIER_ASSIGN_OR_RETURN(std::vector<EngineSource> expanded,
                            ExpandEngineSources(sources, addresses));
    const auto plain = std::count_if(sources.begin(), sources.end(),
                                     [](const EngineSource& s) { return !s.discover; });
    const double discovered = static_cast<double>(expanded.size()) - static_cast<double>(plain);
    KVTIER_RETURN_IF_ERROR(options_.apply(std::move(expanded)));
    discovered_->Set(discovered);
    last_addresses_ = std::move(addresses);
    return Status::Ok();
  }

  const EngineDiscoveryOptions options_;
  Counter* ok_ = nullptr;
  Counter* not_found_ = nullptr;
  Counter* error_ = nullptr;
  Gauge* discovered_ = nullptr;
  // Lock order: never both at once (Run lets go of mu_ before it takes refresh_mu_).
  Mutex mu_;
  CondVar wake_;
  bool stop_ KVTIER_GUARDED_BY(mu_) = false;
  Mutex refresh_mu_;  // serializes resolutions and applies: the thread's and SetSources'
  std::vector<EngineSource> sources_ KVTIER_GUARDED_BY(refresh_mu_);
  std::map<std::string, std::vector<std::string>> last_addresses_ KVTIER_GUARDED_BY(refresh_mu_);
  std::thread thread_;  // the controlling thread's
};

Result<std::unique_ptr<EngineDiscovery>> EngineDiscovery::Create(EngineDiscoveryOptions options) {
  if (!options.apply) return InvalidArgumentError("engine discovery needs an apply function");
  if (options.registry == nullptr) return InvalidArgumentError("engine discovery needs a registry");
  if (options.interval.count() <= 0)
    return InvalidArgumentError("engine discovery's interval must be positive");
  auto impl = std::make_unique<Impl>(std::move(options));
  KVTIER_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<EngineDiscovery>(new EngineDiscovery(std::move(impl)));
}

EngineDiscovery::EngineDiscovery(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EngineDiscovery::~EngineDiscovery() = default;

Status EngineDiscovery::SetSources(std::vector<EngineSource> sources) {
  return impl_->SetSources(std::move(sources));
}

}  // namespace kvtier::coordinator
