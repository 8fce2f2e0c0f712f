#include "services/store/stream/stream_metrics.h"

namespace kvtier::store {
namespace {

size_t Index(StreamOp op) { return IsPut(op) ? 1 : 0; }

}  // namespace

Result<std::unique_ptr<StreamMetrics>> StreamMetrics::Create(MetricsRegistry& r) {
  auto m = std::unique_ptr<StreamMetrics>(new StreamMetrics());
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * transfers,
      r.AddCounter("kvtier_stream_transfers_total",
                   "Transfers on the data stream, by operation and result.", {"op", "result"}));
  KVTIER_ASSIGN_OR_RETURN(CounterFamily * bytes,
                          r.AddCounter("kvtier_stream_bytes_total",
                                       "Payload bytes on the data stream.", {"direction"}));
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * lent,
      r.AddCounter("kvtier_stream_lent_bytes_total",
                   "Of the payload bytes sent, those spliced from the host tier's pages (zero "
                   "copy) rather than copied into the socket."));
  // 100 us to 10 s: a small block on loopback to a large batch on a busy link.
  KVTIER_ASSIGN_OR_RETURN(
      HistogramFamily * seconds,
      r.AddHistogram("kvtier_stream_transfer_seconds",
                     "Data stream transfers, from the request read to the reply written.",
                     {1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3, 10}, {"op"}));
  KVTIER_ASSIGN_OR_RETURN(
      GaugeFamily * staged,
      r.AddGauge("kvtier_stream_staged_bytes", "Staging held by data stream transfers in flight."));
  KVTIER_ASSIGN_OR_RETURN(CounterFamily * expired,
                          r.AddCounter("kvtier_stream_tickets_expired_total",
                                       "Data stream tickets opened and never used."));
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * accept_errors,
      r.AddCounter("kvtier_stream_accept_errors_total",
                   "Failed accepts of data stream connections (descriptors exhausted)."));
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * connections_refused,
      r.AddCounter("kvtier_stream_connections_refused_total",
                   "Data stream connections closed at accept: the most were open."));
  KVTIER_ASSIGN_OR_RETURN(CounterFamily * connections_shed,
                          r.AddCounter("kvtier_stream_connections_shed_total",
                                       "Unproven data stream connections closed for a newcomer."));
  for (const StreamOp op : {StreamOp::kGet, StreamOp::kPut}) {
    const char* name = op == StreamOp::kPut ? "put" : "get";
    m->ok_[Index(op)] = &transfers->WithLabels({name, "ok"});
    m->refused_[Index(op)] = &transfers->WithLabels({name, "refused"});
    m->seconds_[Index(op)] = &seconds->WithLabels({name});
  }
  m->sent_ = &bytes->WithLabels({"sent"});
  m->received_ = &bytes->WithLabels({"received"});
  m->lent_ = &lent->WithLabels({});
  m->staged_ = &staged->WithLabels({});
  m->expired_ = &expired->WithLabels({});
  m->accept_errors_ = &accept_errors->WithLabels({});
  m->connections_refused_ = &connections_refused->WithLabels({});
  m->connections_shed_ = &connections_shed->WithLabels({});
  return m;
}

void StreamMetrics::Transferred(StreamOp op, uint64_t payload_bytes, double seconds) {
  ok_[Index(op)]->Inc();
  (IsPut(op) ? received_ : sent_)->Inc(static_cast<double>(payload_bytes));
  seconds_[Index(op)]->Observe(seconds);
}

void StreamMetrics::Refused(StreamOp op) { refused_[Index(op)]->Inc(); }

}  // namespace kvtier::store
