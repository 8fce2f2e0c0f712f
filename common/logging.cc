#include "common/logging.h"

#include <array>
#include <string>
#include <utility>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace kvtier {

Result<spdlog::level::level_enum> ParseLogLevel(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, spdlog::level::level_enum>, 6> kLevels{{
      {"trace", spdlog::level::trace},
      {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},
      {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},
      {"off", spdlog::level::off},
  }};
  for (const auto& [level_name, level] : kLevels) {
    if (level_name == name) return level;
  }
  return InvalidArgumentError("unknown log level \"" + std::string(name) +
                              "\" (allowed: trace, debug, info, warn, error, off)");
}

void InitLogging(spdlog::level::level_enum level) {
  std::shared_ptr<spdlog::logger> logger = spdlog::get("kvtier");
  if (logger == nullptr) {
    logger = spdlog::stderr_color_mt("kvtier");
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%t] %v");
    spdlog::set_default_logger(logger);
  }
  logger->set_level(level);
}

}  // namespace kvtier
