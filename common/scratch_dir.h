// ScratchDir: a fresh directory made under a parent (mkdtemp), removed with everything in
// it when destroyed: an embedded replay's data, a benchmark's files, a test's.
//
// Thread safety: a move-only value; Create is a pure function of the file system.
// Ownership: owns the directory; a moved-from ScratchDir owns nothing.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace kvtier {

class ScratchDir {
 public:
  // Makes `parent`/`prefix`-XXXXXX (`parent` empty: the system's temporary directory,
  // $TMPDIR or /tmp). kUnavailable naming the parent and the system's reason otherwise.
  [[nodiscard]] static Result<ScratchDir> Create(std::string_view prefix,
                                                 const std::string& parent = {});
  ScratchDir(ScratchDir&& other) noexcept;
  ScratchDir& operator=(ScratchDir&& other) noexcept;
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir();

  const std::string& path() const { return path_; }

 private:
  explicit ScratchDir(std::string path) : path_(std::move(path)) {}
  void Remove();

  std::string path_;  // empty: owns nothing
};

}  // namespace kvtier
