// ConnectFlags: the flags of a command that talks to a running node (`kvtier version
// --connect`, `kvtier status`): its address, the tenant token (given, in KVTIER_TOKEN, or
// in a file: auth::TokenFromFlags) and TLS.
//
// Thread safety: filled by CLI11's parse, then read; one command per process.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace kvtier::cli {

struct ConnectFlags {
  std::string connect;
  std::string token;
  std::string token_file;
  std::string tls_ca_file;
  std::string tls_server_name;

  // Declares the flags on `command`; --connect is required where `connect_required`.
  void AddTo(CLI::App& command, bool connect_required) {
    CLI::Option* address =
        command.add_option("--connect", connect, "The node: host:port or unix:/path");
    address->type_name("ADDR");
    if (connect_required) address->required();
    command.add_option("--token", token, "Tenant token")->envname("KVTIER_TOKEN");
    command.add_option("--token-file", token_file, "File whose first line is the token")
        ->type_name("FILE");
    command.add_option("--tls-ca-file", tls_ca_file, "Use TLS; trust this CA bundle")
        ->type_name("FILE");
    command.add_option("--tls-server-name", tls_server_name,
                       "Name the server certificate must carry");
  }
};

}  // namespace kvtier::cli
