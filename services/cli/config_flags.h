// Command-line flags for every configuration setting, generated from the config schema
// (common/config.h), plus --config FILE. Each flag's help names its environment variable,
// default and allowed values, so `kvtier up --help` documents the whole configuration.
//
// Thread safety: used on the main thread during argument parsing.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/config.h"

namespace kvtier::cli {

class ConfigFlags {
 public:
  // Adds --config and one flag per setting to `command`.
  explicit ConfigFlags(CLI::App& command);
  ConfigFlags(const ConfigFlags&) = delete;
  ConfigFlags& operator=(const ConfigFlags&) = delete;

  // Defaults < --config file (or $KVTIER_CONFIG) < KVTIER_* environment < flags.
  [[nodiscard]] Result<KvtierConfig> Load() const;

 private:
  std::string config_file_;
  std::vector<ConfigFieldInfo> fields_;
  std::vector<std::string> values_;  // one per field, parallel to fields_
  std::vector<CLI::Option*> options_;
};

}  // namespace kvtier::cli
