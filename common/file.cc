#include "common/file.h"

#include <fstream>
#include <sstream>

namespace kvtier {

Result<std::string> ReadTextFile(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) return InvalidArgumentError(what + " " + path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return InvalidArgumentError(what + " " + path + ": read failed");
  return text.str();
}

}  // namespace kvtier
