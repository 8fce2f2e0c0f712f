#include "services/rpc/gcc_kj_workaround.h"  // first: before any KJ header
#include "services/coordinator/rpc/routing_client.h"

#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <kj/async-io.h>
#include <kj/compat/http.h>

#include <memory>

#include "services/rpc/schema/http_api.capnp.h"
#include "services/rpc/status_mapping.h"
#include "services/rpc/tls.h"

namespace kvtier::coordinator {
namespace {

namespace schema = kvtier::rpc::schema;

struct Endpoint {
  bool tls = false;
  std::string address;  // host:port, as kj parses it
  std::string host;     // for the Host header and the certificate's name
};

Result<Endpoint> ParseUrl(const std::string& url) {
  Endpoint e;
  std::string rest;
  if (url.starts_with("http://")) {
    rest = url.substr(7);
  } else if (url.starts_with("https://")) {
    e.tls = true;
    rest = url.substr(8);
  } else {
    return InvalidArgumentError("routing API URL \"" + url +
                                "\": it starts with http:// or https://");
  }
  e.address = rest.substr(0, rest.find('/'));  // a path after the address is the banner's: dropped
  const size_t colon = e.address.rfind(':');
  if (e.address.empty() || colon == std::string::npos || colon + 1 == e.address.size()) {
    return InvalidArgumentError("routing API URL \"" + url + "\": it names no host:port");
  }
  e.host = e.address.substr(0, colon);
  if (e.host.size() >= 2 && e.host.front() == '[' && e.host.back() == ']') {
    e.host = e.host.substr(1, e.host.size() - 2);
  }
  return e;
}

Status FromHttp(capnp::JsonCodec& codec, unsigned code, const kj::String& body) {
  std::string message(body.cStr());
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
                 capnp::MallocMessageBuilder decoded;
                 auto error = decoded.initRoot<schema::ErrorAnswer>();
                 codec.decode(body, error);
                 if (error.hasError()) message = error.getError().cStr();
               })) {
    (void)e;  // not an error answer: its body as it came
  }
  message = "the routing API answered " + std::to_string(code) + ": " + message;
  switch (code) {
    case 400: return InvalidArgumentError(message);
    case 401: return UnauthenticatedError(message);
    case 403: return PermissionDeniedError(message);
    case 404:
    case 405: return NotFoundError(message);
    case 413: return InvalidArgumentError(message);
    case 429: return ResourceExhaustedError(message);
    case 503: return UnavailableError(message);
    default: return InternalError(message);
  }
}

// The call, each step bounded by `deadline`; throws (a KJ exception) when it fails.
kj::String Post(kj::AsyncIoContext& io, kj::TimePoint deadline, const Endpoint& endpoint,
                rpc::TlsClient* tls, const RoutingClientOptions& o, kj::StringPtr path,
                kj::String body, unsigned& status) {
  kj::Timer& timer = io.provider->getTimer();
  auto within = [&](auto promise) {
    return timer.timeoutAt(deadline, kj::mv(promise)).wait(io.waitScope);
  };
  auto address = within(io.provider->getNetwork().parseAddress(endpoint.address.c_str()));
  kj::Own<kj::AsyncIoStream> stream = within(address->connect());
  if (tls != nullptr) {
    const std::string& name = o.tls_server_name.empty() ? endpoint.host : o.tls_server_name;
    stream = within(tls->Wrap(kj::mv(stream), name));
  }
  kj::HttpHeaderTable table;
  auto client = kj::newHttpClient(table, *stream);
  const std::string authorization = "Bearer " + o.token;
  kj::HttpHeaders headers(table);
  headers.set(kj::HttpHeaderId::HOST, endpoint.address.c_str());
  headers.set(kj::HttpHeaderId::CONTENT_TYPE, "application/json");
  headers.add("Authorization", authorization.c_str());
  if (!o.act_for.empty()) headers.add("X-Kvtier-Act-For", o.act_for.c_str());
  auto request = client->request(kj::HttpMethod::POST, path, headers, body.size());
  within(request.body->write(body.begin(), body.size()));
  request.body = nullptr;
  auto response = within(kj::mv(request.response));
  status = response.statusCode;
  return within(response.body->readAllText());
}

}  // namespace

Result<std::string> CallRoutingApi(const RoutingClientOptions& options, RoutingCall call,
                                   const RoutingQuery& query) {
  KVTIER_ASSIGN_OR_RETURN(const Endpoint endpoint, ParseUrl(options.url));
  std::unique_ptr<rpc::TlsClient> tls;
  if (endpoint.tls) {
    if (options.tls_ca_file.empty()) {
      return InvalidArgumentError("routing API URL \"" + options.url +
                                  "\" is https: it needs the CA (--tls-ca-file)");
    }
    KVTIER_ASSIGN_OR_RETURN(tls, rpc::TlsClient::Create(options.tls_ca_file));
  }
  capnp::JsonCodec codec;
  codec.handleByAnnotation<schema::ErrorAnswer>();
  kj::AsyncIoContext io = kj::setupAsyncIo();
  unsigned status = 0;
  kj::String body;
  const kj::StringPtr path = call == RoutingCall::kLookup ? "/v1/lookup" : "/v1/route";
  const kj::TimePoint deadline =
      io.provider->getTimer().now() + options.timeout.count() * kj::MILLISECONDS;
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
                 RoutingQuery sent = query;
                 if (call == RoutingCall::kLookup) {  // a lookup takes no candidates
                   sent.candidates.clear();
                   sent.candidate_active_blocks.clear();
                 }
                 body = Post(io, deadline, endpoint, tls.get(), options, path,
                             kj::str(PromptQueryJson(sent)), status);
               })) {
    return rpc::ExceptionToStatus(*e);
  }
  if (status != 200) return FromHttp(codec, status, body);
  return std::string(body.cStr());
}

namespace {

// Decodes `json` as T; kInternal naming the call when it is not T's JSON.
template <typename T, typename Fn>
Status Decode(const std::string& json, const char* call, Fn&& read) {
  capnp::JsonCodec codec;
  codec.handleByAnnotation<T>();  // the $Json.name field names
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
                 capnp::MallocMessageBuilder message;
                 auto root = message.initRoot<T>();
                 codec.decode(kj::StringPtr(json.c_str()), root);
                 read(root.asReader());
               })) {
    return InternalError(std::string(call) + ": the answer is not the routing API's JSON (" +
                         e->getDescription().cStr() + ")");
  }
  return Status::Ok();
}

}  // namespace

Result<RouteDecision> Route(const RoutingClientOptions& options, const RoutingQuery& query) {
  KVTIER_ASSIGN_OR_RETURN(const std::string json,
                          CallRoutingApi(options, RoutingCall::kRoute, query));
  RouteDecision decision;
  KVTIER_RETURN_IF_ERROR(
      Decode<schema::RouteAnswer>(json, "/v1/route", [&](schema::RouteAnswer::Reader answer) {
        decision.instance = answer.getInstance().cStr();
        decision.prefix_tokens = answer.getPrefixTokens();
        for (auto c : answer.getCandidates())
          decision.candidates.push_back({c.getName().cStr(), c.getPrefixTokens()});
      }));
  return decision;
}

Result<std::vector<InstancePrefixTokens>> Lookup(const RoutingClientOptions& options,
                                                 const RoutingQuery& query) {
  KVTIER_ASSIGN_OR_RETURN(const std::string json,
                          CallRoutingApi(options, RoutingCall::kLookup, query));
  std::vector<InstancePrefixTokens> instances;
  KVTIER_RETURN_IF_ERROR(
      Decode<schema::LookupAnswer>(json, "/v1/lookup", [&](schema::LookupAnswer::Reader answer) {
        for (auto i : answer.getInstances())
          instances.push_back({i.getName().cStr(), i.getPrefixTokens()});
      }));
  return instances;
}

}  // namespace kvtier::coordinator
