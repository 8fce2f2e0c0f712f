#include "services/rpc/gcc_kj_workaround.h"  // first: before any KJ header
#include "services/worker/rpc/landing_hold.h"

#include <spdlog/spdlog.h>

namespace kvtier::worker {

Result<std::shared_ptr<LandingHold>> LandingHold::Take(Worker& worker, ClientId client, SequenceId sequence,
                                                       uint32_t max_blocks) {
  KVTIER_ASSIGN_OR_RETURN(LandingBlocks blocks, worker.HoldLanding(client, sequence, max_blocks));
  return std::make_shared<LandingHold>(worker, std::move(blocks), kj::getCurrentThreadExecutor().addRef());
}

LandingHold::~LandingHold() noexcept {
  const auto release = [this] {
    if (const Status released = worker_.ReleaseBlocks(blocks_.pool_id, blocks_.blocks); !released.ok()) {
      spdlog::warn("giving back {} pool blocks held for a fetch: {}", blocks_.blocks.size(), released.ToString());
    }
  };
  // executeSync runs it inline on the loop's own thread. Its exception is the loop's
  // (DISCONNECTED: it has exited), and the worker goes with the loop: nothing to give back.
  KJ_IF_MAYBE(exception, kj::runCatchingExceptions([&] { loop_->executeSync(release); })) {
    spdlog::debug("pool blocks held for a fetch not given back: {}", exception->getDescription().cStr());
  }
}

}  // namespace kvtier::worker
