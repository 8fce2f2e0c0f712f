// TokenStore: which tenant a bearer token belongs to, and that tenant's cache salt.
//
// Tokens come from a YAML file (mounted from a Kubernetes Secret in production):
//
//   tenants:
//     - name: team-a          # [a-z0-9-]{1,63}
//       token: "…"            # at least 32 characters; generate with `openssl rand -hex 32`
//       salt: "team-a-2026"   # optional; default: the name. Chains under different salts never
//       meet.
//   nodes:                    # optional: credentials of the cluster's own nodes
//     - name: cluster-nodes   # [a-z0-9-]{1,63}, distinct from every tenant's
//       token: "…"            # at least 32 characters, distinct from every other token
//   engines:                  # optional: inference processes that serve tenants
//     - name: vllm-fleet      # [a-z0-9-]{1,63}, distinct from every other name
//       token: "…"            # at least 32 characters, distinct from every other token
//       tenants: [team-a]     # the tenants it may act for (each one listed above)
//
// Who may map pool memory: a pool holds the blocks of every tenant that uses it, so a
// tenant token never maps it (attachPool: PERMISSION_DENIED); an engine credential does.
// An engine authenticates as one of its tenants (Authenticate's `act_for`): the session
// has that tenant's salt and may map pools. Engines that share a pool are trusted alike.
// An engine's session derives a session for any other of its tenants (ActFor), so that
// each request names its tenant on one connection.
//
// A node token is what `kvtier worker` and `kvtier store` present to the coordinator and
// to each other: only a node session may register a node or publish its events, and only
// a node session may read or write blocks under a salt scope it names (a worker fetching
// a tenant's blocks from a peer on that tenant's behalf). A node session has no salt of
// its own: it cannot compute or look up a tenant's keys.
//
// Reload: Reload() reads the file again (kvtier polls it: a Kubernetes Secret's mount is
// replaced in place); a file that does not parse changes nothing. A session opened with a
// token the new file no longer grants as it did (removed, moved to another tenant, its
// engine no longer acting for the tenant) fails its next call: StillGrants.
//
// Only SHA-256 digests of tokens are kept in memory, and a token is checked against every
// tenant's digest with a constant-time comparison, so neither timing nor a memory dump
// reveals a token. With auth disabled (local use), every token maps to tenant "default"
// with an empty salt.
//
// Thread safety: every method may be called from any thread. Copies share one set of
// entries: a Reload through any copy is seen by all of them.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace YAML {
class Node;
}

namespace kvtier::auth {

struct Tenant {
  std::string name;
  std::string salt;
  bool node = false;  // a node credential (see above); every session is one with auth off
  bool maps_pools =
      false;  // may map pool memory: an engine acting for the tenant, a node, or auth off
  // How the session was opened, for StillGrants: the token's digest, and whether an
  // engine's token acts for this tenant.
  std::array<uint8_t, 32> credential = {};
  bool acting = false;
};

// The one user of a local cluster (`kvtier up` without a token file, an embedded replay):
// its only tenant, with an empty salt, and the rights of an engine and of a node.
inline Tenant LocalUser(std::string name) { return Tenant{std::move(name), "", true, true}; }

class TokenStore {
 public:
  // kInvalidArgument naming the file, the entry and the field for every malformed entry,
  // duplicate name or duplicate token.
  [[nodiscard]] static Result<TokenStore> FromFile(const std::string& path);
  [[nodiscard]] static Result<TokenStore> FromYaml(std::string_view yaml,
                                                   std::string_view source_name);
  // One tenant: what `kvtier up` uses when it generates a token for local use.
  [[nodiscard]] static Result<TokenStore> SingleTenant(Tenant tenant, std::string_view token);
  // Any token is accepted as tenant "default" with an empty salt, with a node's rights
  // (auth off: every process is trusted).
  static TokenStore Disabled();

  // The session a token opens, acting for tenant `act_for` (empty: the token's own).
  // kUnauthenticated when the token matches nothing (the message never echoes it);
  // kPermissionDenied when it may not act for `act_for` (only an engine acts for others);
  // kInvalidArgument for an engine token that names no tenant.
  [[nodiscard]] Result<Tenant> Authenticate(std::string_view token,
                                            std::string_view act_for = {}) const;

  // The session that engine session `session` (an Authenticate or ActFor answer) opens
  // for its tenant `tenant`: as Authenticate(the engine's token, tenant). kPermissionDenied
  // when `session` is not an engine's or the engine may not act for `tenant`;
  // kUnauthenticated once a reload revoked the engine's token.
  [[nodiscard]] Result<Tenant> ActFor(const Tenant& session, std::string_view tenant) const;

  // The salt of the tenant named `name` (engines' KV event streams join that tenant's key
  // space). kNotFound naming it when no tenant has that name; "" for any name with auth off.
  [[nodiscard]] Result<std::string> TenantSalt(std::string_view name) const;

  // Ok while the token `session` was opened with (Authenticate's answer) still opens the
  // same session: same tenant, salt and rights. kUnauthenticated naming the tenant once a
  // reload revoked or changed it.
  [[nodiscard]] Status StillGrants(const Tenant& session) const;
  // Reads the file FromFile read again; see the header comment. kFailedPrecondition for a
  // store not made from a file.
  [[nodiscard]] Status Reload();
  // Counts the reloads that changed the entries: a session checked at this generation
  // need not be checked again until it moves.
  uint64_t generation() const { return shared_->generation.load(std::memory_order_acquire); }
  const std::string& path() const { return shared_->path; }

  bool enabled() const { return enabled_; }
  size_t tenant_count() const;
  size_t node_count() const;
  size_t engine_count() const;

 private:
  enum class Kind : uint8_t { kTenant, kNode, kEngine };
  struct Entry {
    Tenant tenant;
    std::array<uint8_t, 32> token_digest;
    Kind kind = Kind::kTenant;
    std::vector<std::string> acts_for = {};  // an engine's tenants
  };
  [[nodiscard]] static Status ParseEntries(const YAML::Node& list, const std::string& where_list,
                                           Kind kind, std::vector<Entry>& entries);
  [[nodiscard]] static Status CheckEngineTenants(const std::vector<Entry>& entries,
                                                 const std::string& source);
  using Entries = std::vector<Entry>;
  static const Entry* FindTenant(const Entries& entries, std::string_view name);
  static Result<Tenant> AuthenticateDigest(const Entries& entries,
                                           const std::array<uint8_t, 32>& digest,
                                           std::string_view act_for);
  std::shared_ptr<const Entries> Current() const;
  TokenStore(bool enabled, Entries entries);

  struct Shared {
    Mutex mu;
    std::shared_ptr<const Entries> entries KVTIER_GUARDED_BY(mu);
    std::atomic<uint64_t> generation{0};
    std::string path;  // FromFile's; empty otherwise
  };
  bool enabled_;
  std::shared_ptr<Shared> shared_;
};

// 32 random bytes from OpenSSL's CSPRNG, as 64 hex digits.
[[nodiscard]] std::string GenerateToken();

// A client's token from a file: its first line (what `kvtier up` writes to
// data_dir/token). kNotFound naming the path when it cannot be read or is empty.
[[nodiscard]] Result<std::string> ReadTokenFile(const std::string& path);

// The token a command was given: `token` when set, else ReadTokenFile(`token_file`) when
// that is set, else empty (a server with auth off takes any).
[[nodiscard]] Result<std::string> TokenFromFlags(const std::string& token,
                                                 const std::string& token_file);

}  // namespace kvtier::auth
