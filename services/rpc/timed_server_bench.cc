// What counting and timing a call costs (timed_server.h): in-process calls of a Session
// capability's ping through a local client, with the capability bare and timed, so that
// the difference is the wrapper's (two clock reads, one continuation, the counter and
// histogram updates) with no socket in the way.
#include <benchmark/benchmark.h>
#include <kj/async.h>

#include <memory>

#include "services/rpc/schema/kvtier.capnp.h"
#include "services/rpc/timed_server.h"

namespace kvtier::rpc {
namespace {

namespace schema = kvtier::rpc::schema;

class EchoSession final : public schema::Session::Server {
 protected:
  kj::Promise<void> ping(PingContext call) override {
    call.getResults().setServerTimeNs(1);
    return kj::READY_NOW;
  }
};

void BM_Ping(benchmark::State& state) {
  const bool timed = state.range(0) != 0;
  kj::EventLoop loop;
  kj::WaitScope wait(loop);
  MetricsRegistry registry;
  std::unique_ptr<RpcMetrics> metrics = RpcMetrics::Create(registry).value();
  auto session = TimeCalls(kj::heap<EchoSession>(), capnp::Schema::from<schema::Session>(),
                           timed ? metrics.get() : nullptr)
                     .castAs<schema::Session>();
  for (auto _ : state) {
    auto response = session.pingRequest().send().wait(wait);
    benchmark::DoNotOptimize(response.getServerTimeNs());
  }
  state.SetLabel(timed ? "timed" : "bare");
}
BENCHMARK(BM_Ping)->Arg(0)->Arg(1);

}  // namespace
}  // namespace kvtier::rpc
