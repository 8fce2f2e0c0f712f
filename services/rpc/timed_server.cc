#include "services/rpc/timed_server.h"

#include <chrono>
#include <string>
#include <vector>

#include "services/rpc/status_mapping.h"

namespace kvtier::rpc {
namespace {

using Clock = std::chrono::steady_clock;

class TimedServer final : public capnp::Capability::Server {
 public:
  TimedServer(kj::Own<capnp::Capability::Server> inner, capnp::InterfaceSchema schema, RpcMetrics& metrics)
      : inner_(kj::mv(inner)), interface_id_(schema.getProto().getId()), metrics_(metrics) {
    const std::string prefix = std::string(schema.getShortDisplayName().cStr()) + ".";
    for (auto method : schema.getMethods()) {
      methods_.push_back({prefix + method.getProto().getName().cStr(), nullptr});
    }
  }

  DispatchCallResult dispatchCall(uint64_t interface_id, uint16_t method_id,
                                  capnp::CallContext<capnp::AnyPointer, capnp::AnyPointer> context) override {
    // Calls of another interface (none of ours inherit) or an unknown method go untimed:
    // the inner server answers them (UNIMPLEMENTED).
    if (interface_id != interface_id_ || method_id >= methods_.size()) {
      return inner_->dispatchCall(interface_id, method_id, context);
    }
    Method* method = &methods_[method_id];
    const Clock::time_point start = Clock::now();
    DispatchCallResult result{kj::READY_NOW, false};
    // A method may throw before it returns a promise.
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { result = inner_->dispatchCall(interface_id, method_id, context); })) {
      Record(*method, ExceptionToStatus(*e), start);
      kj::throwFatalException(kj::mv(*e));
    }
    result.promise = result.promise.then(
        [this, method, start] { Record(*method, Status::Ok(), start); },
        [this, method, start](kj::Exception&& e) {
          Record(*method, ExceptionToStatus(e), start);
          kj::throwFatalException(kj::mv(e));
        });
    return result;
  }

 private:
  struct Method {
    std::string name;
    RpcMetrics::MethodMetrics* metrics;  // looked up at the method's first call
  };

  void Record(Method& method, const Status& status, Clock::time_point start) {
    if (method.metrics == nullptr) method.metrics = &metrics_.ForMethod(method.name);
    const std::chrono::duration<double> elapsed = Clock::now() - start;
    metrics_.RecordCall(*method.metrics, status, elapsed.count());
  }

  kj::Own<capnp::Capability::Server> inner_;
  const uint64_t interface_id_;
  RpcMetrics& metrics_;
  std::vector<Method> methods_;  // by method id
};

}  // namespace

capnp::Capability::Client TimeCalls(kj::Own<capnp::Capability::Server> server, capnp::InterfaceSchema schema,
                                    RpcMetrics* metrics) {
  if (metrics == nullptr) return capnp::Capability::Client(kj::mv(server));
  return capnp::Capability::Client(kj::heap<TimedServer>(kj::mv(server), schema, *metrics));
}

}  // namespace kvtier::rpc
