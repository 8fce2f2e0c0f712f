// RpcMetrics: the metrics every kvtier RPC listener and service method reports.
//
//   kvtier_rpc_connections                 gauge    open connections
//   kvtier_rpc_connections_total           counter  accepted connections
//   kvtier_rpc_connection_errors_total     counter  connections closed by an error {reason}
//   kvtier_rpc_requests_total              counter  method calls {method, code}
//   kvtier_rpc_request_duration_seconds    histogram method latency {method}
//
// `method` is a Session or Bootstrap method's name ("authenticate", "worker"), or
// "<Interface>.<method>" for the capabilities a session hands out ("Worker.allocate";
// timed_server.h).
//   kvtier_rpc_auth_failures_total         counter  rejected tokens
//   kvtier_rpc_auth_throttled_total        counter  tokens not checked: their address's
//                                                   failure budget was spent
//   kvtier_rpc_unauthenticated_connections gauge    open connections not yet authenticated
//   kvtier_rpc_connections_refused_total   counter  connections closed at accept {reason:
//                                                   "address" (too many waiting from it),
//                                                   "full" (max_connections, none to shed)}
//   kvtier_rpc_connections_shed_total      counter  unauthenticated connections closed to
//                                                   make room
//   kvtier_rpc_accept_errors_total         counter  failed accepts (descriptors exhausted)
//
// Thread safety: as common/metrics.h. Create once per registry; share the pointer.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/metrics.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace kvtier::rpc {

class RpcMetrics {
 public:
  [[nodiscard]] static Result<std::unique_ptr<RpcMetrics>> Create(MetricsRegistry& registry);

  Gauge& open_connections() { return *open_connections_; }
  Counter& accepted_connections() { return *accepted_connections_; }
  Counter& connection_errors(std::string_view reason) {
    return connection_errors_->WithLabels({reason});
  }
  Counter& auth_failures() { return *auth_failures_; }
  Counter& auth_throttled() { return *auth_throttled_; }
  Gauge& unauthenticated_connections() { return *unauthenticated_; }
  Counter& refused_connections(std::string_view reason) { return refused_->WithLabels({reason}); }
  Counter& shed_connections() { return *shed_; }
  Counter& accept_errors() { return *accept_errors_; }
  // Counts one finished call of `method` with its outcome and duration.
  void RecordCall(std::string_view method, const Status& status, double seconds);

  // One method's series, found once and kept by a caller that records many calls.
  struct MethodMetrics {
    std::string name;
    Counter* ok = nullptr;
    Histogram* duration = nullptr;
  };
  // The same MethodMetrics for the same name, for as long as this object lives.
  MethodMetrics& ForMethod(std::string_view method);
  void RecordCall(const MethodMetrics& method, const Status& status, double seconds);

 private:
  RpcMetrics() = default;
  Gauge* open_connections_ = nullptr;
  Counter* accepted_connections_ = nullptr;
  Counter* auth_failures_ = nullptr;
  Counter* auth_throttled_ = nullptr;
  Gauge* unauthenticated_ = nullptr;
  CounterFamily* refused_ = nullptr;
  Counter* shed_ = nullptr;
  Counter* accept_errors_ = nullptr;
  CounterFamily* connection_errors_ = nullptr;
  CounterFamily* requests_ = nullptr;
  HistogramFamily* durations_ = nullptr;
  Mutex mu_;  // a leaf
  std::map<std::string, MethodMetrics, std::less<>> methods_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier::rpc
