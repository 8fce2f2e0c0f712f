#include "services/rpc/testing/wire_log.h"

#include <capnp/rpc.capnp.h>
#include <capnp/schema.h>
#include <capnp/serialize.h>

#include <array>
#include <sstream>

#include "services/rpc/schema/coordinator.capnp.h"
#include "services/rpc/schema/kvtier.capnp.h"
#include "services/rpc/schema/store.capnp.h"
#include "services/rpc/schema/worker.capnp.h"

namespace kvtier::rpc::testing {
namespace {

std::string MethodName(uint64_t interface_id, uint16_t method) {
  static const std::array<std::pair<const char*, capnp::InterfaceSchema>, 5> kInterfaces = {{
      {"Bootstrap", capnp::Schema::from<schema::Bootstrap>()},
      {"Session", capnp::Schema::from<schema::Session>()},
      {"Coordinator", capnp::Schema::from<schema::Coordinator>()},
      {"Worker", capnp::Schema::from<schema::Worker>()},
      {"BlockStore", capnp::Schema::from<schema::BlockStore>()},
  }};
  for (const auto& [name, interface] : kInterfaces) {
    if (interface.getProto().getId() != interface_id) continue;
    auto methods = interface.getMethods();
    if (method < methods.size())
      return std::string(name) + "." + methods[method].getProto().getName().cStr();
  }
  std::ostringstream out;
  out << std::hex << interface_id << std::dec << "." << method;
  return out.str();
}

}  // namespace

std::optional<WireMessage> ReadWireMessage(
    kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) {
  capnp::SegmentArrayMessageReader reader(segments);
  const auto message = reader.getRoot<capnp::rpc::Message>();
  if (message.isCall()) {
    const auto call = message.getCall();
    return WireMessage{WireMessage::Kind::kCall, call.getQuestionId(),
                       MethodName(call.getInterfaceId(), call.getMethodId())};
  }
  if (message.isFinish())
    return WireMessage{WireMessage::Kind::kFinish, message.getFinish().getQuestionId(), ""};
  return std::nullopt;
}

}  // namespace kvtier::rpc::testing
