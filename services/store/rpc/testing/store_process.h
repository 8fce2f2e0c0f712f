// Test helper: a `kvtier store` child process on loopback with auth off (any token opens a
// session), its output in a directory of its own, and the RPC address its banner prints.
//
// Thread safety: none. Ownership: kills the process on destruction (ChildProcess).
#pragma once

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "tests/testing/test_util.h"

namespace kvtier::store::testing {

class StoreProcess {
 public:
  // `flags` come after the common ones (listen, coordinator, metrics, auth, log level).
  StoreProcess(const std::vector<std::string>& flags, const std::string& output_dir)
      : process_(Argv(flags), output_dir) {}

  // The RPC address from its banner; empty when it did not come up.
  std::string WaitForAddress() {
    if (!process_.WaitForOutput("Stop with Ctrl-C", std::chrono::seconds(30))) return "";
    std::smatch match;
    const std::string banner = process_.Stdout();
    return std::regex_search(banner, match, std::regex("\\n  rpc +(\\S+)")) ? match[1].str() : "";
  }
  ::kvtier::testing::ChildProcess& process() { return process_; }

 private:
  static std::vector<std::string> Argv(const std::vector<std::string>& flags) {
    std::vector<std::string> argv{std::string(KVTIER_BIN_DIR) + "/kvtier",
                                  "store",
                                  "--auth-enabled",
                                  "false",
                                  "--store-listen",
                                  "127.0.0.1:0",
                                  "--node-coordinator",
                                  "127.0.0.1:1",
                                  "--metrics-port",
                                  "0",
                                  "--metrics-bind",
                                  "127.0.0.1",
                                  "--log-level",
                                  "error"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return argv;
  }
  ::kvtier::testing::ChildProcess process_;
};

}  // namespace kvtier::store::testing
