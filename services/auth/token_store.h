// TokenStore: which tenant a bearer token belongs to, and that tenant's cache salt.
//
// Tokens come from a YAML file (mounted from a Kubernetes Secret in production):
//
//   tenants:
//     - name: team-a          # [a-z0-9-]{1,63}
//       token: "…"            # at least 32 characters; generate with `openssl rand -hex 32`
//       salt: "team-a-2026"   # optional; default: the name. Chains under different salts never meet.
//   nodes:                    # optional: credentials of the cluster's own nodes
//     - name: cluster-nodes   # [a-z0-9-]{1,63}, distinct from every tenant's
//       token: "…"            # at least 32 characters, distinct from every other token
//
// A node token is what `kvtier worker` and `kvtier store` present to the coordinator and
// to each other: only a node session may register a node or publish its events, and only
// a node session may read or write blocks under a salt scope it names (a worker fetching
// a tenant's blocks from a peer on that tenant's behalf). A node session has no salt of
// its own: it cannot compute or look up a tenant's keys.
//
// Only SHA-256 digests of tokens are kept in memory, and a token is checked against every
// tenant's digest with a constant-time comparison, so neither timing nor a memory dump
// reveals a token. With auth disabled (local use), every token maps to tenant "default"
// with an empty salt.
//
// Thread safety: immutable after creation; Authenticate may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace YAML {
class Node;
}

namespace kvtier::auth {

struct Tenant {
  std::string name;
  std::string salt;
  bool node = false;  // a node credential (see above); every session is one with auth off
};

class TokenStore {
 public:
  // kInvalidArgument naming the file, the entry and the field for every malformed entry,
  // duplicate name or duplicate token.
  [[nodiscard]] static Result<TokenStore> FromFile(const std::string& path);
  [[nodiscard]] static Result<TokenStore> FromYaml(std::string_view yaml, std::string_view source_name);
  // One tenant: what `kvtier up` uses when it generates a token for local use.
  [[nodiscard]] static Result<TokenStore> SingleTenant(Tenant tenant, std::string_view token);
  // Any token is accepted as tenant "default" with an empty salt, with a node's rights
  // (auth off: every process is trusted).
  static TokenStore Disabled();

  // kUnauthenticated when the token matches no tenant (the message never echoes it).
  [[nodiscard]] Result<Tenant> Authenticate(std::string_view token) const;

  bool enabled() const { return enabled_; }
  size_t tenant_count() const;
  size_t node_count() const;

 private:
  struct Entry {
    Tenant tenant;
    std::array<uint8_t, 32> token_digest;
  };
  [[nodiscard]] static Status ParseEntries(const YAML::Node& list, const std::string& where_list, bool nodes,
                                          std::vector<Entry>& entries);
  TokenStore(bool enabled, std::vector<Entry> entries) : enabled_(enabled), entries_(std::move(entries)) {}

  bool enabled_;
  std::vector<Entry> entries_;
};

// 32 random bytes from OpenSSL's CSPRNG, as 64 hex digits.
[[nodiscard]] std::string GenerateToken();

// A client's token from a file: its first line (what `kvtier up` writes to
// data_dir/token). kNotFound naming the path when it cannot be read or is empty.
[[nodiscard]] Result<std::string> ReadTokenFile(const std::string& path);

// The token a command was given: `token` when set, else ReadTokenFile(`token_file`) when
// that is set, else empty (a server with auth off takes any).
[[nodiscard]] Result<std::string> TokenFromFlags(const std::string& token, const std::string& token_file);

}  // namespace kvtier::auth
