#include "services/rpc/gcc_kj_workaround.h"  // first: before any KJ header
#include "services/worker/rpc/peers/landing_hold.h"

#include <algorithm>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

namespace kvtier::worker {

Result<std::shared_ptr<LandingHold>> LandingHold::Take(Worker& worker, ClientId client,
                                                       SequenceId sequence, uint32_t max_blocks,
                                                       std::optional<uint32_t> pool_id) {
  KVTIER_ASSIGN_OR_RETURN(LandingBlocks blocks,
                          worker.held().HoldLanding(client, sequence, max_blocks, pool_id));
  return std::make_shared<LandingHold>(worker, std::move(blocks),
                                       kj::getCurrentThreadExecutor().addRef());
}

void LandingHold::Direct(const std::shared_ptr<LandingHold>& hold, PeerFetchRequest& request) {
  const LandingBlocks& blocks = hold->blocks();
  request.keys.resize(std::min(request.keys.size(), blocks.blocks.size()));
  if (!blocks.views.empty()) {
    request.land_in.assign(blocks.views.begin(),
                           blocks.views.begin() + static_cast<ptrdiff_t>(request.keys.size()));
  }
  if (blocks.staged) {  // a device pool's, written into staging: one scatter
    request.land = [staged = blocks.staged](const FetchedBlocks& fetched) {
      return staged->Commit(fetched.keys.size());
    };
  } else if (blocks.views.empty()) {  // a device pool's, into the fetch's buffer; `keep` keeps the
                                      // hold alive
    request.land = [held = hold.get()](const FetchedBlocks& fetched) {
      return held->Land(fetched);
    };
  }
  request.keep = hold;
}

Status LandingHold::Land(const FetchedBlocks& fetched) const {
  const size_t count = fetched.keys.size();
  if (count > blocks_.blocks.size() || fetched.bytes.size() != count * fetched.block_bytes) {
    return InvalidArgumentError("landing " + std::to_string(count) + " fetched blocks in " +
                                std::to_string(fetched.bytes.size()) + " bytes into " +
                                std::to_string(blocks_.blocks.size()) + " held blocks");
  }
  std::vector<std::span<const uint8_t>> ins;
  for (size_t i = 0; i < count; ++i) {
    ins.push_back(std::span(fetched.bytes).subspan(i * fetched.block_bytes, fetched.block_bytes));
  }
  return worker_.held().Land(blocks_.pool_id, std::span(blocks_.blocks).first(count), ins);
}

LandingHold::~LandingHold() noexcept {
  const auto release = [this] {
    if (const Status released = worker_.held().Release(blocks_.pool_id, blocks_.blocks);
        !released.ok()) {
      spdlog::warn("giving back {} pool blocks held for a fetch: {}", blocks_.blocks.size(),
                   released.ToString());
    }
  };
  // executeSync runs it inline on the loop's own thread. Its exception is the loop's
  // (DISCONNECTED: it has exited), and the worker goes with the loop: nothing to give back.
  KJ_IF_MAYBE (exception, kj::runCatchingExceptions([&] { loop_->executeSync(release); })) {
    spdlog::debug("pool blocks held for a fetch not given back: {}",
                  exception->getDescription().cStr());
  }
}

}  // namespace kvtier::worker
