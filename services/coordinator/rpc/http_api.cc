#include "services/coordinator/rpc/http_api.h"

#include <capnp/compat/json.h>
#include <capnp/message.h>

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <string>

#include <spdlog/spdlog.h>

#include "services/coordinator/rpc/prompt_query_json.h"
#include "services/rpc/schema/http_api.capnp.h"
#include "services/rpc/status_mapping.h"

namespace kvtier::coordinator {
namespace {

namespace schema = rpc::schema;

// A prompt's prefixes on one instance, in tokens: by tier (held there or
// faster).
using TierPrefix = std::array<uint32_t, kTierCount>;

std::pair<unsigned, kj::StringPtr> HttpStatusOf(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument: return {400, "Bad Request"};
    case StatusCode::kUnauthenticated: return {401, "Unauthorized"};
    case StatusCode::kPermissionDenied: return {403, "Forbidden"};
    case StatusCode::kNotFound: return {404, "Not Found"};
    case StatusCode::kResourceExhausted: return {429, "Too Many Requests"};
    case StatusCode::kUnavailable: return {503, "Service Unavailable"};
    default: return {500, "Internal Server Error"};
  }
}

// The longest prefix each node holds of the looked-up keys, per tier, in
// blocks.
std::map<NodeId, TierPrefix> PrefixesByNode(const LookupResult& result) {
  std::map<NodeId, TierPrefix> prefixes;
  std::map<NodeId, std::array<bool, kTierCount>> alive;
  if (result.matched_blocks == 0) return prefixes;
  for (const Location& l : result.LocationsOf(0)) alive[l.node].fill(true);
  for (uint32_t block = 0; block < result.matched_blocks; ++block) {
    std::map<NodeId, int> fastest;  // the fastest tier each node holds this block in
    for (const Location& l : result.LocationsOf(block)) {
      auto [it, inserted] = fastest.emplace(l.node, static_cast<int>(l.tier));
      if (!inserted) it->second = std::min(it->second, static_cast<int>(l.tier));
    }
    for (auto& [node, live] : alive) {
      auto f = fastest.find(node);
      for (int t = 0; t < kTierCount; ++t) {
        if (live[t] && f != fastest.end() && f->second <= t) {
          prefixes[node][t] = block + 1;
        } else {
          live[t] = false;
        }
      }
    }
  }
  return prefixes;
}

class HttpApi final : public rpc::HttpPeerService {
 public:
  using Response = kj::HttpService::Response;

  HttpApi(HttpApiOptions options, kj::HttpHeaderTable::Builder& headers)
      : options_(options),
        throttle_(options.throttle),
        table_(headers.getFutureTable()),
        authorization_(headers.add("Authorization")),
        act_for_(headers.add("X-Kvtier-Act-For")) {
    codec_.handleByAnnotation<schema::LookupAnswer>();
    codec_.handleByAnnotation<schema::RouteAnswer>();
    codec_.handleByAnnotation<schema::ErrorAnswer>();
  }

  kj::Own<kj::HttpService> ForPeer(std::string peer) override {
    return kj::heap<Connection>(*this, std::move(peer));
  }

 private:
  // One connection's service: the API, told the client's address.
  class Connection final : public kj::HttpService {
   public:
    Connection(HttpApi& api, std::string peer) : api_(api), peer_(std::move(peer)) {}
    kj::Promise<void> request(kj::HttpMethod method, kj::StringPtr url,
                              const kj::HttpHeaders& headers, kj::AsyncInputStream& body,
                              Response& response) override {
      return api_.Serve(peer_, method, url, headers, body, response);
    }

   private:
    HttpApi& api_;
    const std::string peer_;
  };

  kj::Promise<void> Serve(const std::string& peer, kj::HttpMethod method, kj::StringPtr url,
                          const kj::HttpHeaders& headers, kj::AsyncInputStream& body,
                          Response& response) {
    const bool lookup = url == "/v1/lookup";
    if (!lookup && url != "/v1/route")
      return Error(response, NotFoundError(std::string("no such path: ") + url.cStr()));
    if (method != kj::HttpMethod::POST) {
      return Error(response, InvalidArgumentError(std::string(url.cStr()) + " takes POST"), 405,
                   "Method Not Allowed");
    }
    Result<auth::Tenant> tenant = Authenticate(peer, headers);
    if (!tenant.ok()) return Error(response, tenant.status());
    return body.readAllText(options_.max_body_bytes + 1)
        .then([this, lookup, tenant = std::move(tenant).value(), &response](kj::String text) {
          if (text.size() > options_.max_body_bytes) {
            return Error(response,
                         InvalidArgumentError("the body is over " +
                                              std::to_string(options_.max_body_bytes) + " bytes"),
                         413, "Payload Too Large");
          }
          Result<PromptQuery> query = ParsePromptQuery(std::string_view(text.begin(), text.size()));
          if (!query.ok())
            return Error(response, query.status().WithContext("the body is not a prompt query"));
          return lookup ? Lookup(tenant, *query, response) : Route(tenant, *query, response);
        });
  }

  struct KeySpace {
    EngineKeySpace space;
    std::vector<BlockKey> keys;
  };

  // The request's tenant. A token is checked only while `peer` has failures left in its
  // budget; each one that fails spends one.
  Result<auth::Tenant> Authenticate(const std::string& peer, const kj::HttpHeaders& headers) {
    kj::StringPtr value = headers.get(authorization_).orDefault("");
    if (!options_.tokens->enabled()) return options_.tokens->Authenticate("");
    if (!value.startsWith("Bearer "))
      return UnauthenticatedError("no \"Authorization: Bearer <token>\" header");
    KVTIER_RETURN_IF_ERROR(throttle_.Admit(peer));
    kj::StringPtr act_for = headers.get(act_for_).orDefault("");
    Result<auth::Tenant> tenant =
        options_.tokens->Authenticate(value.slice(7).cStr(), act_for.cStr());
    if (!tenant.ok()) {
      if (const std::optional<uint64_t> failures = throttle_.Failed(peer)) {
        spdlog::warn("routing API: authentication failed from {} ({} time(s) since the last line)",
                     peer, *failures);
      }
    }
    return tenant;
  }

  // The prompt's keys in every key space the tenant's instances use.
  std::vector<KeySpace> KeySpaces(const auth::Tenant& tenant, const PromptQuery& query) const {
    const std::string& model = query.model;
    std::vector<std::pair<std::string, uint32_t>> spaces;
    for (const EngineSource& e : *options_.engines) {
      if (SaltScope(tenant.salt) != e.salt_scope || (!model.empty() && model != e.space.model))
        continue;
      spaces.emplace_back(e.space.model, e.space.tokens_per_block);
    }
    if (options_.sdk_tokens_per_block > 0 && model.empty())
      spaces.emplace_back("", options_.sdk_tokens_per_block);
    std::sort(spaces.begin(), spaces.end());
    spaces.erase(std::unique(spaces.begin(), spaces.end()), spaces.end());
    const EnginePrompt prompt{
        .cache_salt = query.cache_salt, .lora_name = query.lora_name, .lora_id = query.lora_id};
    std::vector<KeySpace> out;
    for (auto& [m, tpb] : spaces) {
      EngineKeySpace space{.tenant = KeySalt(tenant.salt), .model = m, .tokens_per_block = tpb};
      std::vector<BlockKey> keys = EnginePromptKeys(space, query.tokens, prompt);
      out.push_back({std::move(space), std::move(keys)});
    }
    return out;
  }

  kj::Promise<void> Lookup(const auth::Tenant& tenant, const PromptQuery& query,
                           Response& response) {
    std::map<std::string, TierPrefix> best;
    const std::optional<ScopeId> scope = options_.state->scopes.Find(SaltScope(tenant.salt));
    for (const KeySpace& ks : KeySpaces(tenant, query)) {
      if (!scope || ks.keys.empty()) continue;
      const LookupResult result = options_.state->coordinator->Lookup(*scope, ks.keys);
      for (const auto& [node, blocks] : PrefixesByNode(result)) {
        TierPrefix& b = best[options_.state->coordinator->NodeName(node)];
        for (int t = 0; t < kTierCount; ++t)
          b[t] = std::max(b[t], blocks[t] * ks.space.tokens_per_block);
      }
    }
    std::vector<std::pair<std::string, TierPrefix>> sorted(best.begin(), best.end());
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto& a, const auto& b) { return a.second[2] > b.second[2]; });
    capnp::MallocMessageBuilder message;
    auto instances = message.initRoot<schema::LookupAnswer>().initInstances(
        static_cast<unsigned>(sorted.size()));
    for (unsigned i = 0; i < sorted.size(); ++i) {
      instances[i].setName(sorted[i].first);
      instances[i].setPrefixTokens(sorted[i].second[2]);
      auto by_tier = instances[i].initPrefixTokensByTier();
      by_tier.setGpu(sorted[i].second[0]);
      by_tier.setHost(sorted[i].second[1]);
      by_tier.setDisk(sorted[i].second[2]);
    }
    return Reply(response, 200, "OK",
                 codec_.encode(message.getRoot<schema::LookupAnswer>().asReader()));
  }

  kj::Promise<void> Route(const auth::Tenant& tenant, const PromptQuery& query,
                          Response& response) {
    const std::vector<std::string>& candidates = query.candidates;
    const std::vector<uint64_t> loads(query.candidate_active_blocks.begin(),
                                      query.candidate_active_blocks.end());
    if (!loads.empty() && loads.size() != candidates.size()) {
      return Error(response, InvalidArgumentError(
                                 "candidate_active_blocks has " + std::to_string(loads.size()) +
                                 " entries for " + std::to_string(candidates.size()) +
                                 " candidates: one each, in the candidates' order"));
    }
    const ScopeId scope = options_.state->scopes.Find(SaltScope(tenant.salt))
                              .value_or(std::numeric_limits<ScopeId>::max());
    // The key space whose best instance holds the longest prefix (in tokens)
    // decides.
    std::optional<std::vector<RouteChoice>> chosen;
    std::vector<BlockKey> chosen_keys;
    uint32_t chosen_tpb = 1;
    uint64_t chosen_tokens = 0;
    Status last = UnavailableError(
        "no key space to route in: the tenant has "
        "no engines and SDK keys are off");
    for (const KeySpace& ks : KeySpaces(tenant, query)) {
      Result<std::vector<RouteChoice>> all = options_.state->coordinator->RouteAll(
          scope, {.keys = ks.keys, .candidates = candidates, .candidate_active_blocks = loads});
      if (all.ok())
        std::erase_if(*all,
                      [&](const RouteChoice& c) { return OtherTenantsEngine(tenant, c.node); });
      if (all.ok() && all->empty())
        all = UnavailableError("none of the candidates is an instance of this tenant");
      if (!all.ok()) {
        last = all.status();
        continue;
      }
      const uint64_t tokens = uint64_t{all->front().prefix_blocks} * ks.space.tokens_per_block;
      if (!chosen || tokens > chosen_tokens) {
        chosen = std::move(all).value();
        chosen_keys = ks.keys;
        chosen_tpb = ks.space.tokens_per_block;
        chosen_tokens = tokens;
      }
    }
    if (!chosen) return Error(response, last);
    options_.state->coordinator->RecordRoute(
        {.keys = chosen_keys, .candidates = candidates, .candidate_active_blocks = loads},
        chosen->front().node);
    capnp::MallocMessageBuilder message;
    auto answer = message.initRoot<schema::RouteAnswer>();
    answer.setInstance(options_.state->coordinator->NodeName(chosen->front().node));
    answer.setPrefixTokens(chosen->front().prefix_blocks * chosen_tpb);
    auto list = answer.initCandidates(static_cast<unsigned>(chosen->size()));
    for (unsigned i = 0; i < chosen->size(); ++i) {
      const RouteChoice& c = (*chosen)[i];
      list[i].setName(options_.state->coordinator->NodeName(c.node));
      list[i].setPrefixTokens(c.prefix_blocks * chosen_tpb);
      list[i].setActiveBlocks(
          static_cast<uint32_t>(std::min<uint64_t>(c.active_blocks, UINT32_MAX)));
      list[i].setCost(c.cost);
    }
    return Reply(response, 200, "OK", codec_.encode(answer.asReader()));
  }

  // An engine instance ("<engine>" or "<engine>/dp<rank>") whose blocks are
  // another tenant's: never offered to this one (its name alone would tell of
  // it).
  bool OtherTenantsEngine(const auth::Tenant& tenant, NodeId node) const {
    const std::string& name = options_.state->coordinator->NodeName(node);
    const std::string engine = name.substr(0, name.rfind("/dp"));
    for (const EngineSource& e : *options_.engines) {
      if (e.name == engine || e.name == name) return e.salt_scope != SaltScope(tenant.salt);
    }
    return false;
  }

  kj::Promise<void> Error(Response& response, const Status& status, unsigned code = 0,
                          kj::StringPtr text = nullptr) {
    auto [http, http_text] = HttpStatusOf(status.code());
    capnp::MallocMessageBuilder message;
    auto error = message.initRoot<schema::ErrorAnswer>();
    error.setError(status.message());
    error.setCode(std::string(StatusCodeName(status.code())));
    return Reply(response, code != 0 ? code : http, code != 0 ? text : http_text,
                 codec_.encode(error.asReader()));
  }

  kj::Promise<void> Reply(Response& response, unsigned code, kj::StringPtr text, kj::String body) {
    kj::HttpHeaders headers(table_);
    headers.set(kj::HttpHeaderId::CONTENT_TYPE, "application/json");
    auto stream = response.send(code, text, headers, body.size());
    auto written = stream->write(body.begin(), body.size());
    return written.attach(kj::mv(stream), kj::mv(body));
  }

  HttpApiOptions options_;
  rpc::AuthThrottle throttle_;
  const kj::HttpHeaderTable& table_;
  kj::HttpHeaderId authorization_;
  kj::HttpHeaderId act_for_;
  capnp::JsonCodec codec_;
};

}  // namespace

kj::Own<rpc::HttpPeerService> MakeHttpApi(HttpApiOptions options,
                                          kj::HttpHeaderTable::Builder& headers) {
  return kj::heap<HttpApi>(options, headers);
}

}  // namespace kvtier::coordinator
