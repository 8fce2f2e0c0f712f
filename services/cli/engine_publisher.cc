#include "services/cli/engine_publisher.h"

namespace kvtier::cli {

EnginePublisher::EnginePublisher(zmq::context_t& context)
    : socket_(context, zmq::socket_type::xpub) {
  socket_.bind("tcp://127.0.0.1:0");
  endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
}

Status EnginePublisher::WaitForSubscriber(std::chrono::milliseconds timeout) {
  socket_.set(zmq::sockopt::rcvtimeo, static_cast<int>(timeout.count()));
  zmq::message_t subscription;
  if (!socket_.recv(subscription))
    return UnavailableError("the coordinator did not subscribe to " + endpoint_ + " in time");
  return Status::Ok();
}

void EnginePublisher::Publish(const std::string& payload) {
  uint8_t seq[8];
  for (int i = 0; i < 8; ++i) seq[i] = static_cast<uint8_t>(next_seq_ >> (56 - 8 * i));
  ++next_seq_;
  socket_.send(zmq::buffer(std::string_view("kv-events")), zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(seq, sizeof(seq)), zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(payload), zmq::send_flags::none);
}

}  // namespace kvtier::cli
