// A gateway's end of the coordinator's routing API (http_api.h): POST /v1/lookup or
// /v1/route with a prompt's tokens over HTTP (HTTPS with a CA), the answer as the JSON
// object the coordinator sent. What `kvtier route` calls; part of kvtier::coordinator_client.
//
// Thread safety: each call makes its own event loop and connection; safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/coordinator/rpc/prompt_query_json.h"

namespace kvtier::coordinator {

// The body of both calls (prompt_query_json.h): candidates and candidate_active_blocks go
// with /v1/route only (each candidate's load in active blocks as the gateway knows it;
// empty: the coordinator's).
using RoutingQuery = PromptQuery;

struct RoutingClientOptions {
  std::string url = {};    // "http://host:port" or "https://host:port" (the banner's routing line)
  std::string token = {};  // the tenant's, or an engine's or node's acting for one
  std::string act_for = {};
  std::string tls_ca_file = {};      // required for https
  std::string tls_server_name = {};  // default: the URL's host
  std::chrono::milliseconds timeout{5000};
};

enum class RoutingCall { kLookup, kRoute };

// The answer's JSON. kInvalidArgument for a bad URL (or an https one without a CA);
// kUnavailable or kDeadlineExceeded when the coordinator does not answer; an error answer
// comes back as its status (400 kInvalidArgument, 401 kUnauthenticated, 503 kUnavailable,
// ...) with the coordinator's message.
[[nodiscard]] Result<std::string> CallRoutingApi(const RoutingClientOptions& options,
                                                 RoutingCall call, const RoutingQuery& query);

// The answers decoded (what a gateway acts on), errors as CallRoutingApi's; kInternal for an
// answer that is not the API's JSON.
struct InstancePrefixTokens {
  std::string name;
  uint32_t prefix_tokens = 0;
};
struct RouteDecision {
  std::string instance;
  uint32_t prefix_tokens = 0;
  std::vector<InstancePrefixTokens> candidates;  // every candidate, with its prefix
};
[[nodiscard]] Result<RouteDecision> Route(const RoutingClientOptions& options,
                                          const RoutingQuery& query);
// Every instance holding a prefix of the prompt, the longest first.
[[nodiscard]] Result<std::vector<InstancePrefixTokens>> Lookup(const RoutingClientOptions& options,
                                                               const RoutingQuery& query);

}  // namespace kvtier::coordinator
