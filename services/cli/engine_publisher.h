// EnginePublisher: an inference engine's KV event publisher as the benches run it, an XPUB
// socket on loopback sending [topic, seq (8 bytes big-endian), payload] as vLLM does; XPUB
// also tells when the coordinator's subscription has arrived, so that no message is lost
// to a late subscriber.
//
// Thread safety: none (one thread uses it). Ownership: the ZMQ context outlives it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <zmq.hpp>

#include "common/status.h"

namespace kvtier::cli {

class EnginePublisher {
 public:
  explicit EnginePublisher(zmq::context_t& context);

  const std::string& endpoint() const { return endpoint_; }  // tcp://127.0.0.1:<port>

  // kUnavailable: no subscriber within `timeout`.
  [[nodiscard]] Status WaitForSubscriber(std::chrono::milliseconds timeout);

  // Sends `payload` (an EventBatch) under the next sequence number.
  void Publish(const std::string& payload);

 private:
  zmq::socket_t socket_;
  std::string endpoint_;
  uint64_t next_seq_ = 0;
};

}  // namespace kvtier::cli
