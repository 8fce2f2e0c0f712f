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

}  // namespace

Result<TokenStore> TokenStore::FromFile(const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(path, "auth.token_file"));
  return FromYaml(text, "auth.token_file " + path);
}

// Parses one list ("tenants" or "nodes") into `entries`, checking names and tokens
// against everything parsed before.
Status TokenStore::ParseEntries(const YAML::Node& list, const std::string& where_list, bool nodes,
                                std::vector<Entry>& entries) {
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node node = list[i];
    const std::string where = where_list + "[" + std::to_string(i) + "]";
    const char* known = nodes ? "name, token" : "name, token, salt";
    if (!node.IsMap()) return InvalidArgumentError(where + ": expects a mapping with " + known);
    for (const auto& field : node) {
      KVTIER_RETURN_IF_ERROR(CheckPlainKey(field.first, where));
      const std::string key = field.first.Scalar();
      if (key != "name" && key != "token" && (nodes || key != "salt")) {
        return InvalidArgumentError(where + ": unknown field \"" + key + "\" (known: " + known + ")");
      }
    }
    const std::string name = node["name"] ? node["name"].as<std::string>("") : "";
    const std::string token = node["token"] ? node["token"].as<std::string>("") : "";
    if (!IsValidTenantName(name)) {
      return InvalidArgumentError(where + ".name: \"" + name + "\" must match [a-z0-9-]{1,63}");
    }
    if (token.size() < kMinTokenLength) {
      return InvalidArgumentError(where + ".token: must be at least " + std::to_string(kMinTokenLength) +
                                  " characters (got " + std::to_string(token.size()) + ")");
    }
    const std::string salt = nodes ? "" : (node["salt"] ? node["salt"].as<std::string>("") : name);
    Entry entry{{name, salt, nodes}, Digest(token)};
    for (const Entry& other : entries) {
      if (other.tenant.name == name) return InvalidArgumentError(where + ".name: \"" + name + "\" appears twice");
      if (other.token_digest == entry.token_digest) {
        return InvalidArgumentError(where + ".token: the same token is given to " +
                                    (other.tenant.node ? "node credential \"" : "tenant \"") + other.tenant.name + "\"");
      }
    }
    entries.push_back(std::move(entry));
  }
  return Status::Ok();
}

Result<TokenStore> TokenStore::FromYaml(std::string_view yaml, std::string_view source_name) {
  const std::string source(source_name);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(source + ": invalid YAML at line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (!root.IsMap() || !root["tenants"] || !root["tenants"].IsSequence() || root["tenants"].size() == 0) {
    return InvalidArgumentError(source + ": expects a non-empty list under \"tenants\"");
  }
  for (const auto& field : root) {
    KVTIER_RETURN_IF_ERROR(CheckPlainKey(field.first, source));
    const std::string key = field.first.Scalar();
    if (key != "tenants" && key != "nodes") {
      return InvalidArgumentError(source + ": unknown section \"" + key + "\" (known: tenants, nodes)");
    }
  }
  std::vector<Entry> entries;
  KVTIER_RETURN_IF_ERROR(ParseEntries(root["tenants"], source + ": tenants", false, entries));
  if (const YAML::Node nodes = root["nodes"]; nodes) {
    if (!nodes.IsSequence()) return InvalidArgumentError(source + ": \"nodes\" must be a list");
    KVTIER_RETURN_IF_ERROR(ParseEntries(nodes, source + ": nodes", true, entries));
  }
  return TokenStore(true, std::move(entries));
}

Result<TokenStore> TokenStore::SingleTenant(Tenant tenant, std::string_view token) {
  if (!IsValidTenantName(tenant.name)) {
    return InvalidArgumentError("tenant name \"" + tenant.name + "\" must match [a-z0-9-]{1,63}");
  }
  if (token.size() < kMinTokenLength) {
    return InvalidArgumentError("token must be at least " + std::to_string(kMinTokenLength) + " characters");
  }
  std::vector<Entry> entries;
  entries.push_back(Entry{std::move(tenant), Digest(token)});
  return TokenStore(true, std::move(entries));
}

TokenStore TokenStore::Disabled() { return TokenStore(false, {}); }

size_t TokenStore::tenant_count() const {
  return static_cast<size_t>(std::count_if(entries_.begin(), entries_.end(), [](const Entry& e) { return !e.tenant.node; }));
}
size_t TokenStore::node_count() const { return entries_.size() - tenant_count(); }

Result<Tenant> TokenStore::Authenticate(std::string_view token) const {
  if (!enabled_) return Tenant{"default", "", true};
  const std::array<uint8_t, 32> digest = Digest(token);
  const Entry* match = nullptr;
  for (const Entry& entry : entries_) {  // no early exit: time does not depend on which entry matched
    if (CRYPTO_memcmp(entry.token_digest.data(), digest.data(), digest.size()) == 0) match = &entry;
  }
  if (match == nullptr) return UnauthenticatedError("invalid token: it matches no tenant of this cluster");
  return match->tenant;
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
