// The long-running roles of the kvtier binary: `up` (every role in one process) and
// `coordinator`. Each starts its servers, prints its endpoints, blocks until SIGINT or
// SIGTERM, shuts down in order and returns the process exit code.
//
// Exit codes: 0 after a clean shutdown; 1 when a server cannot start (address in use,
// unwritable data directory); configuration errors are reported before this is called.
//
// REQUIRES: SIGINT and SIGTERM are blocked in every thread (BlockShutdownSignals() called
// on the main thread before any other thread starts).
#pragma once

#include "common/config.h"

namespace kvtier::cli {

enum class Role { kUp, kCoordinator };

void BlockShutdownSignals();

// Returns the exit code.
int Serve(Role role, const KvtierConfig& config);

}  // namespace kvtier::cli
