// Fuzz target: TokenStore::FromYaml over a tokens file's text (`--auth-token-file`, mounted
// from a Kubernetes Secret). Beyond not crashing, nothing may escape as an exception
// (yaml-cpp throws), a refusal names what was wrong, and a store it builds refuses a token
// it was not given without echoing it.
#include <cstdint>
#include <string_view>

#include "services/auth/token_store.h"
#include "tests/testing/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvtier::testing::FuzzCheck;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const kvtier::Result<kvtier::auth::TokenStore> store =
      kvtier::auth::TokenStore::FromYaml(text, "tokens.yaml");
  if (!store.ok()) {
    FuzzCheck(!store.status().message().empty(), "a refusal says why");
    return 0;
  }
  // Shorter than any token a file may hold (32 characters at least), so never one of them.
  constexpr std::string_view kStranger = "not-a-token-of-this-file";
  const kvtier::Result<kvtier::auth::Tenant> tenant = store->Authenticate(kStranger);
  FuzzCheck(!tenant.ok() && tenant.status().code() == kvtier::StatusCode::kUnauthenticated,
            "a token not in the file is refused");
  FuzzCheck(tenant.status().message().find(kStranger) == std::string_view::npos,
            "a refusal never echoes the token");
  return 0;
}
