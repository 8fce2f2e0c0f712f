// The configuration schema: one entry per setting. Internal to common/config.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"

namespace kvtier::config_internal {

struct Field {
  std::string_view path;
  std::string_view help;
  std::string allowed;
  bool is_list = false;
  // Parses and validates `values` (one element unless is_list) into the config.
  // Errors are "\"<value>\" is out of range [a, b]" style, without the path.
  std::function<Status(KvtierConfig&, std::span<const std::string>)> set;
  std::function<std::string(const KvtierConfig&)> get;
};

const std::vector<Field>& Fields();
// coordinator.engines, coordinator.http_listen, coordinator.sdk_tokens_per_block
// (config_engines.cc).
void AddEngineFields(std::vector<Field>& fields);
// store.* (config_node_fields.cc).
void AddStoreFields(std::vector<Field>& fields);
// worker.* beyond the pool and layout: tier hand-off, serving, write-through
// (config_node_fields.cc).
void AddWorkerNodeFields(std::vector<Field>& fields);
// "host:port", "[v6]:port" or "unix:/path"; ports in [0, 65535].
Status CheckListenAddress(std::string_view address);
const Field* FindField(std::string_view path);

}  // namespace kvtier::config_internal
