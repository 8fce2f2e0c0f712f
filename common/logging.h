// Logging: process-wide setup of spdlog, which every kvtier module logs through.
//
// Modules call spdlog::info/warn/... directly; this header only parses a level name and
// installs the default logger (stderr, with timestamps and thread ids).
//
// Thread safety: spdlog loggers are thread-safe. InitLogging is called from main, before
// other threads start: first at once (so that nothing logs to spdlog's default stdout
// logger), again to set the configured level.
#pragma once

#include <string_view>

#include <spdlog/spdlog.h>

#include "common/status.h"

namespace kvtier {

// Level names: trace, debug, info, warn, error, off.
[[nodiscard]] Result<spdlog::level::level_enum> ParseLogLevel(std::string_view name);

// Installs the stderr logger at `level`, or sets the level of the one installed.
void InitLogging(spdlog::level::level_enum level);

}  // namespace kvtier
