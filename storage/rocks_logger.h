// RocksLogger: RocksDB's info log, written to kvtier's log (spdlog) instead of a LOG file
// in the disk tier's directory.
//
// RocksDB logs to a file beside its data by default. On a full disk that file's writer
// fails like any other, and RocksDB's next line (its own recovery thread logs one) uses
// the failed writer again, which a RocksDB built with assertions aborts on. Its lines go
// where the operator reads kvtier's anyway, under "rocksdb:": its warnings as warnings,
// its errors as errors, its info and header lines at debug.
//
// Thread safety: safe from any thread (spdlog's logger is).
#pragma once

#include <cstdarg>
#include <memory>

#include <rocksdb/env.h>

namespace kvtier::storage {

class RocksLogger final : public rocksdb::Logger {
 public:
  // Lines below `level` are not formatted at all.
  explicit RocksLogger(rocksdb::InfoLogLevel level) : rocksdb::Logger(level) {}

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override;
  void Logv(rocksdb::InfoLogLevel level, const char* format, va_list ap) override;
  void LogHeader(const char* format, va_list ap) override;
};

}  // namespace kvtier::storage
