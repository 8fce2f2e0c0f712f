#include "common/config.h"

#include <algorithm>
#include <cctype>
#include <map>

#include <yaml-cpp/yaml.h>

#include "common/config_fields.h"
#include "common/file.h"

extern char** environ;

namespace kvtier {
namespace {

using config_internal::Field;
using config_internal::Fields;
using config_internal::FindField;

std::string EnvVarFor(std::string_view path) {
  std::string out = "KVTIER_";
  for (char c : path)
    out += c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string FlagFor(std::string_view path) {
  std::string out = "--";
  for (char c : path) out += (c == '.' || c == '_') ? '-' : c;
  return out;
}

std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    std::string item(text.substr(start, comma - start));
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) out.push_back(std::move(item));
    start = comma + 1;
  }
  return out;
}

// "bind, port" for prefix "metrics.": the keys a YAML section under `prefix` may hold.
// The setter's message, plus the allowed values unless it already states them.
std::string WithAllowed(const Field& field, const Status& status) {
  if (status.message().find(field.allowed) != std::string::npos) return status.message();
  return status.message() + " (allowed: " + field.allowed + ")";
}

std::string KnownKeysUnder(std::string_view prefix) {
  std::vector<std::string_view> keys;
  for (const Field& f : Fields()) {
    if (!f.path.starts_with(prefix)) continue;
    std::string_view rest = f.path.substr(prefix.size());
    rest = rest.substr(0, rest.find('.'));
    if (std::find(keys.begin(), keys.end(), rest) == keys.end()) keys.push_back(rest);
  }
  std::string out;
  for (std::string_view key : keys) out += (out.empty() ? "" : ", ") + std::string(key);
  return out;
}

std::string Where(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.line < 0) return "";
  return " (line " + std::to_string(mark.line + 1) + ", column " + std::to_string(mark.column + 1) +
         ")";
}

Status ApplyLeaf(const Field& field, const YAML::Node& node, std::string_view source,
                 KvtierConfig& config) {
  std::vector<std::string> values;
  if (node.IsScalar()) {
    values.push_back(node.Scalar());
  } else if (node.IsSequence() && field.is_list) {
    for (const YAML::Node& item : node) {
      if (item.IsMap()) {  // a list of records (coordinator.engines): "key=value;key=value"
        std::string spec;
        for (const auto& kv : item) {
          if (!kv.second.IsScalar()) {
            return InvalidArgumentError(std::string(source) + ": " + std::string(field.path) +
                                        Where(kv.second) +
                                        ": a list item's values must be plain values");
          }
          spec += (spec.empty() ? "" : ";") + kv.first.as<std::string>() + "=" + kv.second.Scalar();
        }
        values.push_back(std::move(spec));
        continue;
      }
      if (!item.IsScalar()) {
        return InvalidArgumentError(std::string(source) + ": " + std::string(field.path) +
                                    Where(item) + ": list items must be plain values");
      }
      values.push_back(item.Scalar());
    }
  } else if (node.IsNull()) {
    values.emplace_back();
  } else {
    return InvalidArgumentError(std::string(source) + ": " + std::string(field.path) + Where(node) +
                                ": expects " + (field.is_list ? "a list" : "a single value") +
                                " (allowed: " + field.allowed + ")");
  }
  Status status = field.set(config, values);
  if (!status.ok()) {
    return InvalidArgumentError(std::string(source) + ": " + std::string(field.path) + Where(node) +
                                ": " + WithAllowed(field, status));
  }
  return Status::Ok();
}

Status ApplyMap(const YAML::Node& map, const std::string& prefix, std::string_view source,
                KvtierConfig& config) {
  for (const auto& entry : map) {
    const std::string key = entry.first.as<std::string>();
    const std::string path = prefix + key;
    const YAML::Node& value = entry.second;
    if (const Field* field = FindField(path)) {
      KVTIER_RETURN_IF_ERROR(ApplyLeaf(*field, value, source, config));
      continue;
    }
    const std::string known_under = KnownKeysUnder(path + ".");
    if (!known_under.empty() && value.IsMap()) {
      KVTIER_RETURN_IF_ERROR(ApplyMap(value, path + ".", source, config));
      continue;
    }
    if (!known_under.empty()) {
      return InvalidArgumentError(std::string(source) + ": " + path + Where(entry.first) +
                                  ": expects a section with keys: " + known_under);
    }
    return InvalidArgumentError(
        std::string(source) + ": unknown field \"" + path + "\"" + Where(entry.first) + " (known " +
        (prefix.empty() ? std::string("top-level fields")
                        : "fields in \"" + prefix.substr(0, prefix.size() - 1) + "\"") +
        ": " + KnownKeysUnder(prefix) + ")");
  }
  return Status::Ok();
}

}  // namespace

std::vector<ConfigFieldInfo> ListConfigFields() {
  const KvtierConfig defaults;
  std::vector<ConfigFieldInfo> out;
  for (const Field& f : Fields()) {
    out.push_back({std::string(f.path), EnvVarFor(f.path), FlagFor(f.path), f.allowed,
                   std::string(f.help), f.get(defaults)});
  }
  return out;
}

Status ApplySetting(std::string_view path, std::string_view text, KvtierConfig& config) {
  const Field* field = FindField(path);
  if (field == nullptr)
    return InvalidArgumentError("unknown setting \"" + std::string(path) + "\"");
  const std::vector<std::string> values =
      field->is_list ? SplitList(text) : std::vector<std::string>{std::string(text)};
  Status status = field->set(config, values);
  if (!status.ok()) {
    return InvalidArgumentError(std::string(path) + ": " + WithAllowed(*field, status));
  }
  return Status::Ok();
}

Status ApplyYaml(std::string_view yaml_text, std::string_view source_name, KvtierConfig& config) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string(source_name) + ": invalid YAML at line " +
                                std::to_string(e.mark.line + 1) + ", column " +
                                std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  if (root.IsNull()) return Status::Ok();  // an empty file keeps every default
  if (!root.IsMap()) {
    return InvalidArgumentError(std::string(source_name) +
                                ": the top level must be a mapping of settings");
  }
  try {
    return ApplyMap(root, "", source_name, config);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string(source_name) + ": " + e.msg);
  }
}

namespace {

// A worker's queues sized in bytes must hold at least one block of its layout, or every
// block would pass them by unsaid. A layout the library refuses is left to the worker
// node, which names it.
Status CheckWorkerQueues(const WorkerConfig& worker) {
  const Result<std::vector<WorkerPoolLayout>> pools = WorkerLayouts(worker);
  if (!pools.ok()) return Status::Ok();
  const KvLayout* layout = &pools->front().layout;  // the largest blocks of any pool
  for (const WorkerPoolLayout& p : *pools) {
    if (p.layout.bytes_per_block() > layout->bytes_per_block()) layout = &p.layout;
  }
  const uint64_t block = layout->bytes_per_block();
  const auto too_small = [&](const char* field, uint64_t bytes, const char* off) {
    return InvalidArgumentError(std::string(field) + ": " + std::to_string(bytes) +
                                " bytes hold no block of the " + "worker's layout (" +
                                layout->Fingerprint() + ": " + std::to_string(block) +
                                " bytes a block); give at least " + std::to_string(block) + off);
  };
  if (worker.offload_staging_bytes > 0 && worker.offload_staging_bytes < block) {
    return too_small("worker.offload_staging_bytes", worker.offload_staging_bytes,
                     ", or 0 to turn the staging off");
  }
  if (!worker.write_through_stores.empty() && worker.write_through_queue_bytes < block) {
    return too_small("worker.write_through_queue_bytes", worker.write_through_queue_bytes, "");
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<WorkerPoolLayout>> WorkerLayouts(const WorkerConfig& worker) {
  KVTIER_ASSIGN_OR_RETURN(const KvDtype dtype, ParseDtype(worker.dtype));
  const std::vector<uint32_t>& windows = worker.max_attention_window;
  std::map<uint32_t, std::vector<uint32_t>> layers_by_window;
  for (uint32_t layer = 0; layer < worker.num_layers; ++layer)
    layers_by_window[windows.empty() ? 0 : windows[layer % windows.size()]].push_back(layer);
  if (layers_by_window.size() > 1 && layers_by_window.contains(0)) {
    return InvalidArgumentError(
        "worker.max_attention_window mixes 0 (full attention) with windows: give every "
        "layer its window in tokens, a full-attention layer the longest sequence (as "
        "TensorRT-LLM's max_attention_window)");
  }
  if (worker.sink_tokens > 0 && layers_by_window.contains(0)) {
    return InvalidArgumentError(
        "worker.sink_tokens " + std::to_string(worker.sink_tokens) +
        " needs windowed attention (worker.max_attention_window): sinks exist only there");
  }
  std::vector<WorkerPoolLayout> pools;
  for (auto& [window, layers] : layers_by_window) {
    Result<KvLayout> layout =
        KvLayout::Create({.num_layers = static_cast<uint32_t>(layers.size()),
                          .num_kv_heads = worker.num_kv_heads,
                          .head_dim = worker.head_dim,
                          .tokens_per_block = worker.tokens_per_block,
                          .dtype = dtype,
                          .attention_window = window,
                          .sink_tokens = window == 0 ? 0 : worker.sink_tokens});
    if (!layout.ok()) {
      return layout.status().WithContext(
          window == 0 ? std::string("worker") : "worker pool of window " + std::to_string(window));
    }
    pools.push_back({*std::move(layout), std::move(layers)});
  }
  if (pools.empty()) return InvalidArgumentError("worker.num_layers must be positive");
  return pools;
}

Status ValidateConfig(const KvtierConfig& config) {
  KVTIER_RETURN_IF_ERROR(CheckWorkerQueues(config.worker));
  if (config.tls.cert_file.empty() != config.tls.key_file.empty()) {
    return InvalidArgumentError(
        "tls.cert_file and tls.key_file must be set together (got only " +
        std::string(config.tls.cert_file.empty() ? "tls.key_file" : "tls.cert_file") + ")");
  }
  if (config.coordinator.listen.empty() && config.coordinator.unix_socket.empty()) {
    return InvalidArgumentError(
        "coordinator.listen and coordinator.unix_socket are both empty: nothing to listen on");
  }
  return Status::Ok();
}

Result<KvtierConfig> LoadConfig(const ConfigSources& sources) {
  KvtierConfig config;
  if (!sources.yaml_path.empty()) {
    KVTIER_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(sources.yaml_path, "config file"));
    KVTIER_RETURN_IF_ERROR(ApplyYaml(text, sources.yaml_path, config));
  }
  for (const Field& field : Fields()) {
    const auto it = sources.environment.find(EnvVarFor(field.path));
    if (it == sources.environment.end()) continue;
    Status status = ApplySetting(field.path, it->second, config);
    if (!status.ok()) return status.WithContext("environment " + it->first);
  }
  for (const auto& [path, text] : sources.flags) {
    Status status = ApplySetting(path, text, config);
    if (!status.ok()) return status.WithContext("flag " + FlagFor(path));
  }
  KVTIER_RETURN_IF_ERROR(ValidateConfig(config));
  return config;
}

std::map<std::string, std::string> ProcessEnvironment() {
  std::map<std::string, std::string> out;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const size_t eq = text.find('=');
    if (eq != std::string_view::npos) out.emplace(text.substr(0, eq), text.substr(eq + 1));
  }
  return out;
}

}  // namespace kvtier
