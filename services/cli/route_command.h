// `kvtier route`: what a gateway asks the coordinator's routing API (POST /v1/route, or
// /v1/lookup with --lookup) for a prompt whose token ids are in a file, answered as the
// API's JSON on one line. For an operator checking where a prompt would go, and for
// scripts.
//
// Thread safety: one command per process, from main.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/status.h"

namespace kvtier::cli {

// The token ids of a tokens file: unsigned 32-bit integers separated by whitespace or
// commas, optionally inside one pair of brackets (a JSON array). kInvalidArgument names
// the file and the first entry that is not a token id; an empty list is refused too.
[[nodiscard]] Result<std::vector<uint32_t>> ParseTokensFile(const std::string& path);

class RouteCommand {
 public:
  explicit RouteCommand(CLI::App& app);
  bool parsed() const { return route_->parsed(); }
  // Returns the exit code: 0, 1 (the API refused or did not answer), 2 (bad usage: an
  // unreadable tokens or token file).
  int Run() const;

 private:
  CLI::App* route_;
  std::string http_;
  std::string token_, token_file_, act_for_;
  std::string tokens_file_;
  std::string cache_salt_, lora_name_, model_;
  std::vector<std::string> candidates_;
  std::string tls_ca_file_, tls_server_name_;
  bool lookup_ = false;
};

}  // namespace kvtier::cli
