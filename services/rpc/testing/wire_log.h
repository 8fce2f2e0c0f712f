// Test helpers: what a Cap'n Proto RPC message on the wire is, for tests that check the
// order of Calls and Finishes a client sends (services/rpc/deferred_finish.h).
//
// Thread safety: the functions are pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <capnp/common.h>
#include <kj/common.h>

namespace kvtier::rpc::testing {

struct WireMessage {
  enum class Kind : uint8_t { kCall, kFinish };
  Kind kind = Kind::kCall;
  uint32_t question = 0;
  // kCall: "Interface.method" for kvtier's interfaces (Bootstrap, Session, Coordinator,
  // Worker, BlockStore), "<interface id in hex>.<method index>" for any other.
  std::string method;
  friend bool operator==(const WireMessage&, const WireMessage&) = default;
};

// The Call or Finish in `segments` (one rpc::Message); nullopt for every other kind.
std::optional<WireMessage> ReadWireMessage(
    kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments);

}  // namespace kvtier::rpc::testing
