// The coordinator's engine settings: engines whose KV event streams it follows,
// and the routing API's listener. An engine is one list item,
// "key=value;key=value" (config.h's EngineConfig); YAML maps arrive in that
// form too (config.cc).
#include <charconv>

#include "common/config_field_kinds.h"
#include "common/config_fields.h"

namespace kvtier::config_internal {
namespace {

Status CheckEndpoint(std::string_view what, std::string_view endpoint) {
  if (endpoint.starts_with("tcp://") || endpoint.starts_with("ipc://")) return Status::Ok();
  return InvalidArgumentError(std::string(what) + " " + Quote(endpoint) +
                              " is not tcp://host:port (or ipc://path)");
}

Status SetEngineKey(EngineConfig& e, std::string_view key, std::string_view value) {
  if (key == "name") {
    e.name = value;
  } else if (key == "events") {
    KVTIER_RETURN_IF_ERROR(CheckEndpoint("events", value));
    e.events = value;
  } else if (key == "replay") {
    if (!value.empty()) KVTIER_RETURN_IF_ERROR(CheckEndpoint("replay", value));
    e.replay = value;
  } else if (key == "format") {
    if (value != "vllm" && value != "sglang" && value != "trtllm") {
      return InvalidArgumentError("format " + Quote(value) + " is not one of vllm, sglang, trtllm");
    }
    e.format = value;
  } else if (key == "tokens_per_block") {
    uint32_t n = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || end != value.data() + value.size() || n == 0 || n > 65536) {
      return InvalidArgumentError("tokens_per_block " + Quote(value) +
                                  " is not a whole number in [1, 65536]");
    }
    e.tokens_per_block = n;
  } else if (key == "tenant") {
    e.tenant = value;
  } else if (key == "model") {
    e.model = value;
  } else if (key == "discovery") {
    if (!value.empty() && value != "dns")
      return InvalidArgumentError("discovery " + Quote(value) + " is not dns (or empty)");
    e.discovery = value;
  } else {
    return InvalidArgumentError("unknown engine key " + Quote(key) +
                                " (known: name, events, replay, format, "
                                "tokens_per_block, tenant, model, discovery)");
  }
  return Status::Ok();
}

Result<EngineConfig> ParseEngine(std::string_view spec) {
  EngineConfig e;
  size_t start = 0;
  while (start < spec.size()) {
    const size_t end = std::min(spec.find(';', start), spec.size());
    const std::string_view item = spec.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return InvalidArgumentError(Quote(item) + " is not key=value");
    KVTIER_RETURN_IF_ERROR(SetEngineKey(e, item.substr(0, eq), item.substr(eq + 1)));
  }
  if (e.name.empty()) return InvalidArgumentError("engine " + Quote(spec) + " has no name");
  if (e.events.empty())
    return InvalidArgumentError("engine \"" + e.name + "\" has no events endpoint");
  return e;
}

std::string EngineSpec(const EngineConfig& e) {
  return "name=" + e.name + ";events=" + e.events +
         (e.replay.empty() ? "" : ";replay=" + e.replay) + ";format=" + e.format +
         ";tokens_per_block=" + std::to_string(e.tokens_per_block) +
         (e.tenant.empty() ? "" : ";tenant=" + e.tenant) +
         (e.model.empty() ? "" : ";model=" + e.model) +
         (e.discovery.empty() ? "" : ";discovery=" + e.discovery);
}

Field EnginesField() {
  Field f{"coordinator.engines",
          "Inference engines whose KV event streams (ZMQ) the coordinator "
          "follows, each "
          "name=...;events=tcp://host:port;replay=tcp://"
          "host:port;format=vllm|sglang|trtllm;"
          "tokens_per_block=N;tenant=...;model=...;discovery=dns",
          "a list of engines (name, events, replay, format, tokens_per_block, "
          "tenant, model, discovery)",
          true,
          {},
          {}};
  f.set = [](KvtierConfig& c, std::span<const std::string> v) -> Status {
    std::vector<EngineConfig> engines;
    for (const std::string& spec : v) {
      if (spec.empty() && v.size() == 1) break;  // an empty value: no engines
      KVTIER_ASSIGN_OR_RETURN(EngineConfig e, ParseEngine(spec));
      for (const EngineConfig& other : engines) {
        if (other.name == e.name)
          return InvalidArgumentError("engine \"" + e.name + "\" is listed twice");
      }
      engines.push_back(std::move(e));
    }
    c.coordinator.engines = std::move(engines);
    return Status::Ok();
  };
  f.get = [](const KvtierConfig& c) {
    std::string out;
    for (const EngineConfig& e : c.coordinator.engines)
      out += (out.empty() ? "" : ",") + EngineSpec(e);
    return out;
  };
  return f;
}

Field HttpListenField() {
  Field f{"coordinator.http_listen",
          "Addresses of the routing API for gateways (POST /v1/lookup, "
          "/v1/route; HTTPS when TLS is on); "
          "empty: off.",
          "a list of host:port or [ipv6]:port",
          true,
          {},
          {}};
  f.set = [](KvtierConfig& c, std::span<const std::string> v) -> Status {
    std::vector<std::string> items;
    for (const std::string& item : v) {
      if (item.empty() && v.size() == 1) break;
      if (item.starts_with("unix:"))
        return InvalidArgumentError(Quote(item) + ": the routing API listens on TCP only");
      KVTIER_RETURN_IF_ERROR(CheckListenAddress(item));
      items.push_back(item);
    }
    c.coordinator.http_listen = std::move(items);
    return Status::Ok();
  };
  f.get = [](const KvtierConfig& c) {
    std::string out;
    for (const std::string& item : c.coordinator.http_listen)
      out += (out.empty() ? "" : ",") + item;
    return out;
  };
  return f;
}

}  // namespace

void AddEngineFields(std::vector<Field>& fields) {
  fields.push_back(EnginesField());
  fields.push_back(HttpListenField());
  Field sdk{"coordinator.sdk_tokens_per_block",
            "Block size of SDK clients' keys, for the routing API's lookups by "
            "tokens (`kvtier up` uses "
            "worker.tokens_per_block); 0: engines' keys only.",
            "[0, 65536]",
            false,
            {},
            {}};
  sdk.set = [](KvtierConfig& c, std::span<const std::string> v) -> Status {
    if (v.size() != 1) return InvalidArgumentError("expects a single value");
    uint32_t n = 0;
    const auto [end, ec] = std::from_chars(v[0].data(), v[0].data() + v[0].size(), n);
    if (v[0].empty() || ec != std::errc() || end != v[0].data() + v[0].size() || n > 65536) {
      return InvalidArgumentError(Quote(v[0]) + " is not a whole number in [0, 65536]");
    }
    c.coordinator.sdk_tokens_per_block = n;
    return Status::Ok();
  };
  sdk.get = [](const KvtierConfig& c) {
    return std::to_string(c.coordinator.sdk_tokens_per_block);
  };
  fields.push_back(std::move(sdk));
}

}  // namespace kvtier::config_internal
