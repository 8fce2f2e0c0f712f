#include "common/scratch_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

namespace kvtier {

Result<ScratchDir> ScratchDir::Create(std::string_view prefix, const std::string& parent) {
  std::error_code error;
  const std::string base =
      parent.empty() ? std::filesystem::temp_directory_path(error).string() : parent;
  if (error) return UnavailableError("no temporary directory: " + error.message());
  std::string pattern = base + "/" + std::string(prefix) + "-XXXXXX";  // mkdtemp's template
  if (mkdtemp(pattern.data()) == nullptr) {
    return UnavailableError("cannot create a scratch directory in " + base + ": " +
                            std::strerror(errno));
  }
  return ScratchDir(std::move(pattern));
}

ScratchDir::ScratchDir(ScratchDir&& other) noexcept : path_(std::exchange(other.path_, {})) {}

ScratchDir& ScratchDir::operator=(ScratchDir&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::exchange(other.path_, {});
  }
  return *this;
}

ScratchDir::~ScratchDir() { Remove(); }

void ScratchDir::Remove() {
  if (path_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
  path_.clear();
}

}  // namespace kvtier
