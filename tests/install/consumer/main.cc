// Uses the installed SDK: block keys, and a connection that must fail cleanly.
#include <cstdio>
#include <vector>

#include <kvtier/services/client/client.h>

int main() {
  std::vector<uint32_t> prompt(40);
  for (uint32_t i = 0; i < prompt.size(); ++i) prompt[i] = 100 + i;
  const std::vector<kvtier::BlockKey> keys = kvtier::client::Client::BlockKeys(prompt, 16);
  if (keys.size() != 2 || keys[0] == keys[1]) return 1;
  // The shared vocabulary, as the SDK names it.
  const kvtier::client::RetentionConfig retention{.decode_priority = kvtier::kDefaultPriority};
  if (kvtier::TierName(kvtier::client::Tier::kHost) != "host" || retention.decode_priority != 35)
    return 3;
  // Nothing listens on port 1: the SDK reports UNAVAILABLE.
  auto client = kvtier::client::Client::Connect({.address = "127.0.0.1:1", .token = "t"});
  if (client.ok() || client.status().code() != kvtier::StatusCode::kUnavailable) return 2;
  std::printf("consumer ok: %zu keys, first %s; connect: %s\n", keys.size(),
              keys[0].ToHex().c_str(), client.status().ToString().c_str());
  return 0;
}
