#include "services/auth/token_store.h"

#include <algorithm>
#include <fstream>

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <yaml-cpp/yaml.h>

#include "common/file.h"

namespace kvtier::auth {
namespace {

constexpr size_t kMinTokenLength = 32;

std::array<uint8_t, 32> Digest(std::string_view token) {
  std::array<uint8_t, 32> digest{};
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest.data());
  return digest;
}

// A list, a mapping or nothing used as a key (`? [a]: b`, `~: b`), which yaml-cpp converts
// to text only by throwing: refused by name instead.
Status CheckPlainKey(const YAML::Node& key, const std::string& where) {
  if (key.IsScalar()) return Status::Ok();
  const char* kind = key.IsSequence() ? "a list" : (key.IsMap() ? "a mapping" : "empty");
  return InvalidArgumentError(where + ": a key must be a plain name; this one is " + kind);
}

bool IsValidTenantName(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

// An engine's `tenants:` field: a non-empty list of names.
Result<std::vector<std::string>> EngineTenants(const YAML::Node& node, const std::string& where) {
  const YAML::Node list = node["tenants"];
  if (!list || !list.IsSequence() || list.size() == 0) {
    return InvalidArgumentError(where +
                                ".tenants: expects a non-empty list of the tenants it acts for");
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].IsScalar())
      return InvalidArgumentError(where + ".tenants[" + std::to_string(i) + "]: expects a name");
    names.push_back(list[i].Scalar());
  }
  return names;
}

const char* KnownFields(bool tenant, bool engine) {
  return tenant ? "name, token, salt" : (engine ? "name, token, tenants" : "name, token");
}

}  // namespace

Result<TokenStore> TokenStore::FromFile(const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(path, "auth.token_file"));
  KVTIER_ASSIGN_OR_RETURN(TokenStore store, FromYaml(text, "auth.token_file " + path));
  store.shared_->path = path;
  return store;
}

// Parses one list ("tenants", "nodes" or "engines") into `entries`, checking names and
// tokens against everything parsed before.
Status TokenStore::ParseEntries(const YAML::Node& list, const std::string& where_list, Kind kind,
                                std::vector<Entry>& entries) {
  const bool tenant = kind == Kind::kTenant, engine = kind == Kind::kEngine;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node node = list[i];
    const std::string where = where_list + "[" + std::to_string(i) + "]";
    const char* known = KnownFields(tenant, engine);
    if (!node.IsMap()) return InvalidArgumentError(where + ": expects a mapping with " + known);
    for (const auto& field : node) {
      KVTIER_RETURN_IF_ERROR(CheckPlainKey(field.first, where));
      const std::string key = field.first.Scalar();
      if (key != "name" && key != "token" && !(tenant && key == "salt") &&
          !(engine && key == "tenants")) {
        return InvalidArgumentError(where + ": unknown field \"" + key + "\" (known: " + known +
                                    ")");
      }
    }
    const std::string name = node["name"] ? node["name"].as<std::string>("") : "";
    const std::string token = node["token"] ? node["token"].as<std::string>("") : "";
    if (!IsValidTenantName(name)) {
      return InvalidArgumentError(where + ".name: \"" + name + "\" must match [a-z0-9-]{1,63}");
    }
    if (token.size() < kMinTokenLength) {
      return InvalidArgumentError(where + ".token: must be at least " +
                                  std::to_string(kMinTokenLength) + " characters (got " +
                                  std::to_string(token.size()) + ")");
    }
    const std::string salt =
        !tenant ? "" : (node["salt"] ? node["salt"].as<std::string>("") : name);
    Entry entry{{name, salt, kind == Kind::kNode, kind == Kind::kNode}, Digest(token), kind};
    if (engine) {
      KVTIER_ASSIGN_OR_RETURN(entry.acts_for, EngineTenants(node, where));
    }
    for (const Entry& other : entries) {
      if (other.tenant.name == name)
        return InvalidArgumentError(where + ".name: \"" + name + "\" appears twice");
      if (other.token_digest == entry.token_digest) {
        const char* what = other.kind == Kind::kNode
                               ? "node credential \""
                               : (other.kind == Kind::kEngine ? "engine \"" : "tenant \"");
        return InvalidArgumentError(where + ".token: the same token is given to " + what +
                                    other.tenant.name + "\"");
      }
    }
    entries.push_back(std::move(entry));
  }
  return Status::Ok();
}

Status TokenStore::CheckEngineTenants(const std::vector<Entry>& entries,
                                      const std::string& source) {
  for (size_t e = 0; e < entries.size(); ++e) {
    for (const std::string& name : entries[e].acts_for) {
      const bool known = std::any_of(entries.begin(), entries.end(), [&](const Entry& t) {
        return t.kind == Kind::kTenant && t.tenant.name == name;
      });
      if (!known) {
        return InvalidArgumentError(source + ": engine \"" + entries[e].tenant.name +
                                    "\" acts for \"" + name +
                                    "\", which is not a tenant of this file");
      }
    }
  }
  return Status::Ok();
}

Result<TokenStore> TokenStore::FromYaml(std::string_view yaml, std::string_view source_name) {
  const std::string source(source_name);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(source + ": invalid YAML at line " +
                                std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (!root.IsMap() || !root["tenants"] || !root["tenants"].IsSequence() ||
      root["tenants"].size() == 0) {
    return InvalidArgumentError(source + ": expects a non-empty list under \"tenants\"");
  }
  for (const auto& field : root) {
    KVTIER_RETURN_IF_ERROR(CheckPlainKey(field.first, source));
    const std::string key = field.first.Scalar();
    if (key != "tenants" && key != "nodes" && key != "engines") {
      return InvalidArgumentError(source + ": unknown section \"" + key +
                                  "\" (known: tenants, nodes, engines)");
    }
  }
  std::vector<Entry> entries;
  KVTIER_RETURN_IF_ERROR(
      ParseEntries(root["tenants"], source + ": tenants", Kind::kTenant, entries));
  for (const auto& [section, kind] :
       {std::pair{"nodes", Kind::kNode}, std::pair{"engines", Kind::kEngine}}) {
    const YAML::Node list = root[section];
    if (!list) continue;
    if (!list.IsSequence())
      return InvalidArgumentError(source + ": \"" + section + "\" must be a list");
    KVTIER_RETURN_IF_ERROR(ParseEntries(list, source + ": " + section, kind, entries));
  }
  KVTIER_RETURN_IF_ERROR(CheckEngineTenants(entries, source));
  return TokenStore(true, std::move(entries));
}

Result<TokenStore> TokenStore::SingleTenant(Tenant tenant, std::string_view token) {
  if (!IsValidTenantName(tenant.name)) {
    return InvalidArgumentError("tenant name \"" + tenant.name + "\" must match [a-z0-9-]{1,63}");
  }
  if (token.size() < kMinTokenLength) {
    return InvalidArgumentError("token must be at least " + std::to_string(kMinTokenLength) +
                                " characters");
  }
  std::vector<Entry> entries;
  entries.push_back(Entry{std::move(tenant), Digest(token)});
  return TokenStore(true, std::move(entries));
}

TokenStore TokenStore::Disabled() { return TokenStore(false, {}); }

TokenStore::TokenStore(bool enabled, Entries entries)
    : enabled_(enabled), shared_(std::make_shared<Shared>()) {
  MutexLock lock(shared_->mu);
  shared_->entries = std::make_shared<const Entries>(std::move(entries));
}

std::shared_ptr<const TokenStore::Entries> TokenStore::Current() const {
  MutexLock lock(shared_->mu);
  return shared_->entries;
}

size_t TokenStore::tenant_count() const {
  const std::shared_ptr<const Entries> entries = Current();
  return static_cast<size_t>(std::count_if(entries->begin(), entries->end(),
                                           [](const Entry& e) { return e.kind == Kind::kTenant; }));
}
size_t TokenStore::node_count() const {
  const std::shared_ptr<const Entries> entries = Current();
  return static_cast<size_t>(std::count_if(entries->begin(), entries->end(),
                                           [](const Entry& e) { return e.kind == Kind::kNode; }));
}
size_t TokenStore::engine_count() const {
  return Current()->size() - tenant_count() - node_count();
}

const TokenStore::Entry* TokenStore::FindTenant(const Entries& entries, std::string_view name) {
  for (const Entry& entry : entries) {
    if (entry.kind == Kind::kTenant && entry.tenant.name == name) return &entry;
  }
  return nullptr;
}

Result<Tenant> TokenStore::Authenticate(std::string_view token, std::string_view act_for) const {
  if (!enabled_) return Tenant{"default", "", true, true};
  return AuthenticateDigest(*Current(), Digest(token), act_for);
}

Result<Tenant> TokenStore::ActFor(const Tenant& session, std::string_view tenant) const {
  if (!enabled_) return Authenticate("", tenant);
  if (!session.acting) {
    return PermissionDeniedError("\"" + session.name + "\" may not act for tenant \"" +
                                 std::string(tenant) +
                                 "\": only an engine credential acts for another tenant");
  }
  return AuthenticateDigest(*Current(), session.credential, tenant);
}

Result<std::string> TokenStore::TenantSalt(std::string_view name) const {
  if (!enabled_) return std::string();
  const Entry* entry = FindTenant(*Current(), name);
  if (entry == nullptr)
    return NotFoundError("no tenant named \"" + std::string(name) + "\" in the token file");
  return entry->tenant.salt;
}

Result<Tenant> TokenStore::AuthenticateDigest(const Entries& entries,
                                              const std::array<uint8_t, 32>& digest,
                                              std::string_view act_for) {
  const Entry* match = nullptr;
  for (const Entry& entry :
       entries) {  // no early exit: time does not depend on which entry matched
    if (CRYPTO_memcmp(entry.token_digest.data(), digest.data(), digest.size()) == 0) match = &entry;
  }
  if (match == nullptr)
    return UnauthenticatedError("invalid token: it matches no tenant of this cluster");
  const std::string& name = match->tenant.name;
  if (match->kind != Kind::kEngine) {
    if (!act_for.empty() && act_for != name) {
      return PermissionDeniedError(
          "\"" + name + "\" may not act for tenant \"" + std::string(act_for) +
          "\": only an engine credential acts for a tenant other than its own");
    }
    Tenant own = match->tenant;
    own.credential = digest;
    return own;
  }
  if (act_for.empty()) {
    return InvalidArgumentError("engine \"" + name +
                                "\" acts for a tenant: name one of its tenants");
  }
  const bool allowed =
      std::find(match->acts_for.begin(), match->acts_for.end(), act_for) != match->acts_for.end();
  const Entry* tenant = allowed ? FindTenant(entries, act_for) : nullptr;
  if (tenant == nullptr) {
    return PermissionDeniedError("engine \"" + name + "\" may not act for tenant \"" +
                                 std::string(act_for) + "\"");
  }
  Tenant acting = tenant->tenant;
  acting.maps_pools = true;
  acting.credential = digest;
  acting.acting = true;
  return acting;
}

Status TokenStore::StillGrants(const Tenant& session) const {
  if (!enabled_) return Status::Ok();
  Result<Tenant> now =
      AuthenticateDigest(*Current(), session.credential, session.acting ? session.name : "");
  const bool same = now.ok() && now->name == session.name && now->salt == session.salt &&
                    now->node == session.node && now->maps_pools == session.maps_pools;
  if (same) return Status::Ok();
  return UnauthenticatedError(
      "the credential of this session (tenant \"" + session.name +
      "\") was revoked or changed by a reload of the token file; authenticate again");
}

Status TokenStore::Reload() {
  if (shared_->path.empty())
    return FailedPreconditionError("this token store was not read from a file");
  KVTIER_ASSIGN_OR_RETURN(TokenStore fresh, FromFile(shared_->path));
  std::shared_ptr<const Entries> entries = fresh.Current();
  MutexLock lock(shared_->mu);
  shared_->entries = std::move(entries);
  shared_->generation.fetch_add(1, std::memory_order_acq_rel);
  return Status::Ok();
}

std::string GenerateToken() {
  std::array<unsigned char, 32> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    // OpenSSL's CSPRNG cannot fail once seeded from the kernel; a failure here means the
    // process cannot make secrets at all, so stop rather than hand out a weak token.
    std::abort();
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 0xF];
  }
  return out;
}

Result<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  std::string token;
  if (!in || !std::getline(in, token) || token.empty()) {
    return NotFoundError("token file " + path + ": cannot be read, or its first line is empty");
  }
  return token;
}

Result<std::string> TokenFromFlags(const std::string& token, const std::string& token_file) {
  if (!token.empty() || token_file.empty()) return token;
  return ReadTokenFile(token_file);
}

}  // namespace kvtier::auth
