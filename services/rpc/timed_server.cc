#include "services/rpc/timed_server.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "services/rpc/status_mapping.h"

namespace kvtier::rpc {
namespace {

using Clock = std::chrono::steady_clock;

class TimedServer final : public capnp::Capability::Server {
 public:
  TimedServer(kj::Own<capnp::Capability::Server> inner, capnp::InterfaceSchema schema,
              RpcMetrics& metrics)
      : inner_(kj::mv(inner)),
        interface_id_(schema.getProto().getId()),
        metrics_(metrics),
        methods_(std::make_shared<std::vector<Method>>()) {
    const std::string prefix = std::string(schema.getShortDisplayName().cStr()) + ".";
    for (auto method : schema.getMethods()) {
      methods_->push_back({prefix + method.getProto().getName().cStr(), nullptr});
    }
  }

  DispatchCallResult dispatchCall(
      uint64_t interface_id, uint16_t method_id,
      capnp::CallContext<capnp::AnyPointer, capnp::AnyPointer> context) override {
    // Calls of another interface (none of ours inherit) or an unknown method go untimed:
    // the inner server answers them (UNIMPLEMENTED).
    if (interface_id != interface_id_ || method_id >= methods_->size()) {
      return inner_->dispatchCall(interface_id, method_id, context);
    }
    Method* method = &(*methods_)[method_id];
    const Clock::time_point start = Clock::now();
    DispatchCallResult result{kj::READY_NOW, false};
    // A method may throw before it returns a promise.
    KJ_IF_MAYBE (e, kj::runCatchingExceptions(
                        [&] { result = inner_->dispatchCall(interface_id, method_id, context); })) {
      Record(metrics_, *method, ExceptionToStatus(*e), start);
      kj::throwFatalException(kj::mv(*e));
    }
    // The continuation holds the method table, not this server, which its connection may
    // drop before the call ends.
    result.promise = result.promise.then(
        [&metrics = metrics_, methods = methods_, method, start] {
          Record(metrics, *method, Status::Ok(), start);
        },
        [&metrics = metrics_, methods = methods_, method, start](kj::Exception&& e) {
          Record(metrics, *method, ExceptionToStatus(e), start);
          kj::throwFatalException(kj::mv(e));
        });
    return result;
  }

 private:
  struct Method {
    std::string name;
    RpcMetrics::MethodMetrics* metrics;  // looked up at the method's first call
  };

  static void Record(RpcMetrics& metrics, Method& method, const Status& status,
                     Clock::time_point start) {
    if (method.metrics == nullptr) method.metrics = &metrics.ForMethod(method.name);
    const std::chrono::duration<double> elapsed = Clock::now() - start;
    metrics.RecordCall(*method.metrics, status, elapsed.count());
  }

  kj::Own<capnp::Capability::Server> inner_;
  const uint64_t interface_id_;
  RpcMetrics& metrics_;
  std::shared_ptr<std::vector<Method>> methods_;  // by method id
};

}  // namespace

capnp::Capability::Client TimeCalls(kj::Own<capnp::Capability::Server> server,
                                    capnp::InterfaceSchema schema, RpcMetrics* metrics) {
  if (metrics == nullptr) return capnp::Capability::Client(kj::mv(server));
  return capnp::Capability::Client(kj::heap<TimedServer>(kj::mv(server), schema, *metrics));
}

}  // namespace kvtier::rpc
