#include "storage/rocks_logger.h"

#include <cstdio>

#include <spdlog/spdlog.h>

namespace kvtier::storage {
namespace {

spdlog::level::level_enum LevelOf(rocksdb::InfoLogLevel level) {
  switch (level) {
    case rocksdb::InfoLogLevel::DEBUG_LEVEL:
    case rocksdb::InfoLogLevel::INFO_LEVEL:
    case rocksdb::InfoLogLevel::HEADER_LEVEL: return spdlog::level::debug;
    case rocksdb::InfoLogLevel::WARN_LEVEL: return spdlog::level::warn;
    case rocksdb::InfoLogLevel::ERROR_LEVEL: return spdlog::level::err;
    case rocksdb::InfoLogLevel::FATAL_LEVEL:
    default: return spdlog::level::critical;
  }
}

}  // namespace

void RocksLogger::Logv(const char* format, va_list ap) {
  Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
}

void RocksLogger::LogHeader(const char* format, va_list ap) {
  Logv(rocksdb::InfoLogLevel::HEADER_LEVEL, format, ap);
}

void RocksLogger::Logv(rocksdb::InfoLogLevel level, const char* format, va_list ap) {
  if (level < GetInfoLogLevel()) return;
  const spdlog::level::level_enum to = LevelOf(level);
  if (!spdlog::should_log(to)) return;
  char line[1024];
  std::vsnprintf(line, sizeof(line), format, ap);
  spdlog::log(to, "rocksdb: {}", line);
}

}  // namespace kvtier::storage
