// Whole-file reads for configuration-like inputs (YAML config, token files, PEM files).
//
// The error is kInvalidArgument, because the path came from the user's configuration, and
// names what the file is for: "auth.token_file /etc/kvtier/tokens.yaml: cannot be read".
//
// Thread safety: a pure function of the file system.
#pragma once

#include <string>

#include "common/status.h"

namespace kvtier {

// `what` names the setting or role of the file, e.g. "tls.cert_file" or "config file".
[[nodiscard]] Result<std::string> ReadTextFile(const std::string& path, const std::string& what);

}  // namespace kvtier
