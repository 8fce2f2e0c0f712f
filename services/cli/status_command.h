// `kvtier status`: what a running node says about itself over the RPC, for an operator
// at a shell (`kubectl exec ... kvtier status`): the coordinator's index and membership
// counters and the worker's pools, for whichever of the two the node runs.
//
// Thread safety: one command per process, from main.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "services/cli/connect_flags.h"

namespace kvtier::cli {

class StatusCommand {
 public:
  explicit StatusCommand(CLI::App& app);
  bool parsed() const { return status_->parsed(); }
  // Returns the exit code: 0, 1 (the node is unreachable or refused the session), 2 (bad
  // usage: an unreadable token file).
  int Run() const;

 private:
  CLI::App* status_;
  ConnectFlags node_;
  std::string coordinator_;
  bool json_ = false;
};

}  // namespace kvtier::cli
