// StreamMetrics: Prometheus metrics of a node's data stream (data_stream_server.h).
//
//   kvtier_stream_transfers_total{op,result}   counter: op get|put (keyed or not), result
//   ok|refused kvtier_stream_bytes_total{direction}       counter: payload bytes sent|received
//   kvtier_stream_lent_bytes_total             counter: of those sent, spliced from the host
//                                              tier's pages (zero copy)
//   kvtier_stream_transfer_seconds{op}         histogram: request read to reply written
//   kvtier_stream_staged_bytes                 gauge: staging held by transfers in flight
//   kvtier_stream_tickets_expired_total        counter: tickets opened and never used
//   kvtier_stream_accept_errors_total          counter: failed accepts (descriptors exhausted)
//   kvtier_stream_connections_refused_total    counter: closed at accept (too many unproven
//                                              from its address, or none to shed)
//   kvtier_stream_connections_shed_total       counter: unproven, closed for a newcomer
//
// Thread safety: every method is safe from any thread (lock-free metric updates).
// Ownership: the registry outlives the metrics.
#pragma once

#include <memory>

#include "common/metrics.h"
#include "services/store/stream/protocol.h"

namespace kvtier::store {

class StreamMetrics {
 public:
  // kAlreadyExists when the registry has these names already (one stream per registry).
  [[nodiscard]] static Result<std::unique_ptr<StreamMetrics>> Create(MetricsRegistry& registry);

  void Transferred(StreamOp op, uint64_t payload_bytes, double seconds);
  void Refused(StreamOp op);
  void Expired(uint64_t tickets) { expired_->Inc(static_cast<double>(tickets)); }
  void Staged(uint64_t bytes) { staged_->Set(static_cast<double>(bytes)); }
  void Lent(uint64_t bytes) { lent_->Inc(static_cast<double>(bytes)); }
  void AcceptFailed() { accept_errors_->Inc(); }
  void ConnectionRefused() { connections_refused_->Inc(); }
  void ConnectionsShed(uint32_t count) { connections_shed_->Inc(count); }

 private:
  StreamMetrics() = default;

  Counter* ok_[2] = {};  // [get, put]
  Counter* refused_[2] = {};
  Counter* sent_ = nullptr;
  Counter* received_ = nullptr;
  Counter* lent_ = nullptr;
  Histogram* seconds_[2] = {};
  Gauge* staged_ = nullptr;
  Counter* expired_ = nullptr;
  Counter* accept_errors_ = nullptr;
  Counter* connections_refused_ = nullptr;
  Counter* connections_shed_ = nullptr;
};

}  // namespace kvtier::store
