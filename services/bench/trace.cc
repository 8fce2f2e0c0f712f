#include "services/bench/trace.h"

#include <fstream>

#include <yaml-cpp/yaml.h>

namespace kvtier::bench {
namespace {

// JSON is (for these lines) a subset of YAML, so yaml-cpp, already a dependency, reads it.
template <typename T>
Result<T> Field(const YAML::Node& node, const char* name) {
  const YAML::Node value = node[name];
  if (!value) return InvalidArgumentError(std::string("missing field \"") + name + "\"");
  try {
    return value.as<T>();
  } catch (const YAML::Exception&) {
    return InvalidArgumentError(std::string("field \"") + name +
                                "\" is not a non-negative integer");
  }
}

}  // namespace

Result<TraceRequest> ParseMooncakeLine(const std::string& line) {
  YAML::Node node;
  try {
    node = YAML::Load(line);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError("not JSON: " + e.msg);
  }
  if (!node.IsMap()) return InvalidArgumentError("expects a JSON object");
  TraceRequest request;
  KVTIER_ASSIGN_OR_RETURN(request.timestamp_ms, Field<uint64_t>(node, "timestamp"));
  KVTIER_ASSIGN_OR_RETURN(request.input_length, Field<uint32_t>(node, "input_length"));
  KVTIER_ASSIGN_OR_RETURN(request.output_length, Field<uint32_t>(node, "output_length"));
  KVTIER_ASSIGN_OR_RETURN(request.hash_ids, Field<std::vector<uint64_t>>(node, "hash_ids"));
  // In 64 bits: rounding a length near 2^32 up in 32 would wrap to a handful of blocks.
  const uint64_t expected =
      (uint64_t{request.input_length} + kMooncakeTokensPerBlock - 1) / kMooncakeTokensPerBlock;
  if (request.hash_ids.size() != expected) {
    return InvalidArgumentError("hash_ids has " + std::to_string(request.hash_ids.size()) +
                                " ids but input_length " + std::to_string(request.input_length) +
                                " needs " + std::to_string(expected) + " blocks of 512 tokens");
  }
  return request;
}

Result<std::vector<TraceRequest>> ReadMooncakeTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("trace " + path + ": cannot be read");
  std::vector<TraceRequest> requests;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Result<TraceRequest> request = ParseMooncakeLine(line);
    if (!request.ok()) {
      return InvalidArgumentError("trace " + path + ", line " + std::to_string(number) + ": " +
                                  request.status().message());
    }
    requests.push_back(*std::move(request));
  }
  if (requests.empty()) return InvalidArgumentError("trace " + path + ": no requests");
  return requests;
}

}  // namespace kvtier::bench
