#include "services/auth/token_store.h"

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
  std::vector<Entry> entries;
  for (size_t i = 0; i < root["tenants"].size(); ++i) {
    const YAML::Node node = root["tenants"][i];
    const std::string where = source + ": tenants[" + std::to_string(i) + "]";
    if (!node.IsMap()) return InvalidArgumentError(where + ": expects a mapping with name, token and salt");
    for (const auto& field : node) {
      const std::string key = field.first.as<std::string>();
      if (key != "name" && key != "token" && key != "salt") {
        return InvalidArgumentError(where + ": unknown field \"" + key + "\" (known: name, token, salt)");
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
    Entry entry{{name, node["salt"] ? node["salt"].as<std::string>("") : name}, Digest(token)};
    for (const Entry& other : entries) {
      if (other.tenant.name == name) return InvalidArgumentError(where + ".name: \"" + name + "\" appears twice");
      if (other.token_digest == entry.token_digest) {
        return InvalidArgumentError(where + ".token: the same token is given to tenant \"" + other.tenant.name + "\"");
      }
    }
    entries.push_back(std::move(entry));
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

Result<Tenant> TokenStore::Authenticate(std::string_view token) const {
  if (!enabled_) return Tenant{"default", ""};
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

}  // namespace kvtier::auth
