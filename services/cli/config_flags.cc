#include "services/cli/config_flags.h"

namespace kvtier::cli {

ConfigFlags::ConfigFlags(CLI::App& command) : fields_(ListConfigFields()) {
  command.add_option("--config", config_file_, "YAML configuration file (env KVTIER_CONFIG)")
      ->type_name("FILE")
      ->group("Configuration");
  values_.resize(fields_.size());
  for (size_t i = 0; i < fields_.size(); ++i) {
    const ConfigFieldInfo& f = fields_[i];
    const std::string help = f.help + " (allowed: " + f.allowed +
                             "; default: " + (f.default_value.empty() ? "none" : f.default_value) +
                             "; env: " + f.env_var + ")";
    options_.push_back(
        command.add_option(f.flag, values_[i], help)->type_name("VALUE")->group("Settings"));
  }
}

Result<KvtierConfig> ConfigFlags::Load() const {
  ConfigSources sources;
  sources.environment = ProcessEnvironment();
  sources.yaml_path = config_file_;
  if (sources.yaml_path.empty()) {
    const auto it = sources.environment.find("KVTIER_CONFIG");
    if (it != sources.environment.end()) sources.yaml_path = it->second;
  }
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (options_[i]->count() > 0) sources.flags.emplace_back(fields_[i].path, values_[i]);
  }
  return LoadConfig(sources);
}

}  // namespace kvtier::cli
