// The coordinator's routing API for gateways: HTTP/JSON on its own listener
// (coordinator.http_listen), served on the coordinator's event loop
// (rpc::HttpListener).
//
//   POST /v1/lookup  {"tokens": [...], "cache_salt"?, "lora_name"?, "lora_id"?,
//   "model"?}
//     200 {"instances": [{"name", "prefix_tokens", "prefix_tokens_by_tier":
//     {"gpu", "host", "disk"}}]} every engine instance and kvtier node holding
//     a prefix of the prompt, the longest first; prefix_tokens_by_tier[t] is
//     the longest prefix held in tier t or a faster one.
//   POST /v1/route   the same body, plus "candidates"?: [names] and
//     "candidate_active_blocks"?: [n] (the gateway's load of each candidate, in
//     the candidates' order, in place of the coordinator's: engines report none)
//     200 {"instance", "prefix_tokens", "candidates": [{"name",
//     "prefix_tokens", "active_blocks", "cost"}]} the instance Route chooses
//     (overlap and load), and every candidate's score.
//
// Every request carries `Authorization: Bearer <token>`: the tenant's token (or
// an engine's or node's acting as one, X-Kvtier-Act-For naming it); the prompt
// is looked up in that tenant's key space only. Prompts are keyed at every
// (model, tokens_per_block) the tenant's engines use (EnginePromptKeys) and at
// the SDK's (no model, sdk_tokens_per_block); "model" narrows that to one
// model. Errors answer {"error", "code"} with 400 (bad JSON or fields), 401 (no
// or a wrong token), 404 (another path), 405 (not POST), 413 (a body over
// max_body_bytes), 429 (the client's address spent its budget of failed tokens:
// no token from it is checked until the budget refills, as on the RPC
// listeners, rpc/auth_throttle.h), 503 (nothing to route to). The body is read
// only after the token checks.
//
// Thread safety: runs on the coordinator's event-loop thread, as the state
// does. Ownership: the state, token store and engine list outlive the service.
#pragma once

#include <kj/compat/http.h>

#include <cstdint>
#include <vector>

#include "services/auth/token_store.h"
#include "services/coordinator/engines/engine_feed.h"
#include "services/coordinator/rpc/coordinator_service.h"
#include "services/rpc/auth_throttle.h"
#include "services/rpc/http_listener.h"

namespace kvtier::coordinator {

struct HttpApiOptions {
  CoordinatorState* state = nullptr;                   // required
  const auth::TokenStore* tokens = nullptr;            // required
  const std::vector<EngineSource>* engines = nullptr;  // required: the configured engines
  uint32_t sdk_tokens_per_block = 16;                  // 0: SDK clients' keys are not looked up
  uint64_t max_body_bytes = uint64_t{4} << 20;
  rpc::AuthThrottleOptions throttle = {};  // failed tokens an address may send
};

// The service an rpc::HttpListener serves, each connection knowing its peer.
[[nodiscard]] kj::Own<rpc::HttpPeerService> MakeHttpApi(HttpApiOptions options,
                                                        kj::HttpHeaderTable::Builder& headers);

}  // namespace kvtier::coordinator
