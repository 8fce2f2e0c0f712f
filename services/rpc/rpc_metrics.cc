#include "services/rpc/rpc_metrics.h"
#include "common/mutex.h"

namespace kvtier::rpc {

Result<std::unique_ptr<RpcMetrics>> RpcMetrics::Create(MetricsRegistry& registry) {
  std::unique_ptr<RpcMetrics> m(new RpcMetrics());
  KVTIER_ASSIGN_OR_RETURN(GaugeFamily * open,
                          registry.AddGauge("kvtier_rpc_connections", "Open RPC connections."));
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * accepted,
      registry.AddCounter("kvtier_rpc_connections_total", "Accepted RPC connections."));
  KVTIER_ASSIGN_OR_RETURN(m->connection_errors_,
                          registry.AddCounter("kvtier_rpc_connection_errors_total",
                                              "RPC connections closed by an error.", {"reason"}));
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * auth,
      registry.AddCounter("kvtier_rpc_auth_failures_total", "Rejected authentication tokens."));
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * throttled,
      registry.AddCounter("kvtier_rpc_auth_throttled_total",
                          "Tokens not checked: their address's failure budget was spent."));
  KVTIER_ASSIGN_OR_RETURN(GaugeFamily * unauthenticated,
                          registry.AddGauge("kvtier_rpc_unauthenticated_connections",
                                            "Open RPC connections not yet authenticated."));
  KVTIER_ASSIGN_OR_RETURN(m->refused_,
                          registry.AddCounter("kvtier_rpc_connections_refused_total",
                                              "RPC connections closed at accept.", {"reason"}));
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * shed,
      registry.AddCounter("kvtier_rpc_connections_shed_total",
                          "Unauthenticated RPC connections closed to make room."));
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * accept_errors,
      registry.AddCounter("kvtier_rpc_accept_errors_total",
                          "Failed accepts of RPC connections (descriptors exhausted)."));
  KVTIER_ASSIGN_OR_RETURN(
      m->requests_, registry.AddCounter("kvtier_rpc_requests_total", "RPC method calls by outcome.",
                                        {"method", "code"}));
  KVTIER_ASSIGN_OR_RETURN(
      m->durations_,
      registry.AddHistogram("kvtier_rpc_request_duration_seconds", "RPC method latency.",
                            ExponentialBuckets(5e-6, 2, 20), {"method"}));
  m->open_connections_ = &open->WithLabels({});
  m->accepted_connections_ = &accepted->WithLabels({});
  m->auth_failures_ = &auth->WithLabels({});
  m->auth_throttled_ = &throttled->WithLabels({});
  m->unauthenticated_ = &unauthenticated->WithLabels({});
  m->shed_ = &shed->WithLabels({});
  m->accept_errors_ = &accept_errors->WithLabels({});
  return m;
}

void RpcMetrics::RecordCall(std::string_view method, const Status& status, double seconds) {
  requests_->WithLabels({method, StatusCodeName(status.code())}).Inc();
  durations_->WithLabels({method}).Observe(seconds);
}

RpcMetrics::MethodMetrics& RpcMetrics::ForMethod(std::string_view method) {
  MutexLock lock(mu_);
  if (auto it = methods_.find(method); it != methods_.end()) return it->second;
  MethodMetrics metrics{.name = std::string(method),
                        .ok = &requests_->WithLabels({method, StatusCodeName(StatusCode::kOk)}),
                        .duration = &durations_->WithLabels({method})};
  return methods_.emplace(std::string(method), std::move(metrics)).first->second;
}

void RpcMetrics::RecordCall(const MethodMetrics& method, const Status& status, double seconds) {
  if (status.ok()) {
    method.ok->Inc();
  } else {
    requests_->WithLabels({method.name, StatusCodeName(status.code())}).Inc();
  }
  method.duration->Observe(seconds);
}

}  // namespace kvtier::rpc
