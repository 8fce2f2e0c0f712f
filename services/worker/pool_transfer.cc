#include "services/worker/pool_transfer.h"

#include <algorithm>
#include <chrono>

namespace kvtier::worker {
namespace {

using SteadyClock = std::chrono::steady_clock;

size_t BlockOffset(const KvLayout& layout, BlockId block) {
  return size_t{block} * layout.bytes_per_block();
}

}  // namespace

std::vector<BlockKey> PoolTransfer::Offload(TransferPool pool,
                                            std::span<const EvictedBlock> evicted) {
  std::vector<const EvictedBlock*> keep;
  keep.reserve(evicted.size());
  for (auto victim = evicted.rbegin(); victim != evicted.rend(); ++victim) {
    if (victim->offload) keep.push_back(&*victim);
  }
  const size_t per_batch = pool.storage.BatchLimit(pool.layout.bytes_per_block());
  std::vector<BlockKey> refused;
  for (size_t first = 0; first < keep.size(); first += per_batch) {
    OffloadBatch(pool, std::span(keep).subspan(first, std::min(per_batch, keep.size() - first)),
                 refused);
  }
  return refused;
}

void PoolTransfer::OffloadBatch(TransferPool pool, std::span<const EvictedBlock* const> victims,
                                std::vector<BlockKey>& refused) {
  const size_t block_bytes = pool.layout.bytes_per_block();
  std::vector<uint32_t> ids;
  ids.reserve(victims.size());
  for (const EvictedBlock* victim : victims) ids.push_back(victim->block);
  std::vector<std::span<const uint8_t>> views;
  const auto read_start = SteadyClock::now();
  const bool readable =
      offload_ != nullptr && pool.storage.ReadBlocks(ids, block_bytes, &views).ok();
  const auto store_start = SteadyClock::now();
  counts_.offload_transfer += store_start - read_start;
  std::vector<Status> taken;  // one per victim; none when their bytes could not be read
  if (readable) {
    std::vector<OffloadBlock> blocks;
    blocks.reserve(victims.size());
    for (size_t i = 0; i < victims.size(); ++i) {
      const EvictedBlock& v = *victims[i];
      blocks.push_back({v.key, v.parent, v.first, v.format_tag, v.salt_scope, v.priority,
                        &pool.layout, views[i]});
    }
    taken = offload_->OffloadBatch(blocks);
  }
  for (size_t i = 0; i < victims.size(); ++i) {
    if (i < taken.size() && taken[i].ok()) {
      ++counts_.offloaded_blocks;
      counts_.offloaded_bytes += block_bytes;
    } else {
      ++counts_.dropped_offloads;
      refused.push_back(victims[i]->key);
    }
  }
  counts_.offload_store += SteadyClock::now() - store_start;
}

Status PoolTransfer::Onboard(TransferPool pool, OnboardScope scope,
                             std::span<const uint32_t> blocks, std::span<const BlockKey> keys,
                             OnboardSource& source, OnboardResult& result) {
  const size_t per_batch = pool.storage.BatchLimit(pool.layout.bytes_per_block());
  const uint32_t before = result.onboarded_blocks;
  for (size_t first = 0; first < blocks.size() && result.onboarded_blocks - before == first;
       first += per_batch) {
    KVTIER_RETURN_IF_ERROR(
        OnboardBatch(pool, scope, blocks.subspan(first, std::min(per_batch, blocks.size() - first)),
                     keys.subspan(first), source, result));
  }
  return Status::Ok();
}

Status PoolTransfer::OnboardBatch(TransferPool pool, OnboardScope scope,
                                  std::span<const uint32_t> batch, std::span<const BlockKey> keys,
                                  OnboardSource& source, OnboardResult& result) {
  const size_t block_bytes = pool.layout.bytes_per_block();
  std::vector<std::span<uint8_t>> views;
  KVTIER_RETURN_IF_ERROR(pool.storage.WritableBlocks(batch, block_bytes, &views));
  std::vector<OnboardBlock> blocks;
  blocks.reserve(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    blocks.push_back(
        {keys[i], scope.format_tag, scope.salt_scope, &pool.layout, views[i], batch[i]});
  }
  const auto fetch_start = SteadyClock::now();
  const std::vector<Result<SourceTier>> tiers = source.FetchBatch(blocks);
  std::vector<uint32_t> to_land;  // positions in `batch`
  to_land.reserve(batch.size());
  uint32_t fetched = 0;
  for (; fetched < batch.size() && fetched < tiers.size(); ++fetched) {
    const Result<SourceTier>& tier = tiers[fetched];
    if (!tier.ok()) break;
    ++(*tier == SourceTier::kHost   ? result.from_host
       : *tier == SourceTier::kDisk ? result.from_disk
                                    : result.from_remote);
    if (*tier == SourceTier::kRemoteInPlace) {
      ++counts_.landed_in_place;
    } else {
      to_land.push_back(fetched);
    }
  }
  result.onboarded_blocks += fetched;
  const auto write_start = SteadyClock::now();
  counts_.onboard_fetch += write_start - fetch_start;
  Status landed = to_land.empty()
                      ? Status::Ok()
                      : pool.storage.CommitWrites(batch.first(fetched), block_bytes, to_land);
  counts_.onboard_transfer += SteadyClock::now() - write_start;
  if (landed.ok() && !to_land.empty()) {
    std::vector<OnboardBlock> done;
    std::vector<SourceTier> from;
    done.reserve(to_land.size());
    from.reserve(to_land.size());
    for (const uint32_t i : to_land) {
      done.push_back(blocks[i]);
      from.push_back(*tiers[i]);
    }
    source.Landed(done, from);
  }
  return landed;
}

// The runs sit at a fixed pitch in a block ([layer][k|v][kv_head][token][head_dim]), so
// this is one strided copy (one cudaMemcpy2D on a GPU); a quantized block's scales of
// those tokens ([layer][k|v][kv_head][token] after the values) are a second one.
Status PoolTransfer::CopyTokens(TransferPool pool, const PartialCopy& copy) {
  const KvLayout& layout = pool.layout;
  const size_t run_bytes = size_t{copy.tokens} * layout.bytes_per_head_row();
  const size_t runs = size_t{layout.num_layers()} * 2 * layout.num_kv_heads();
  const size_t destination = BlockOffset(layout, copy.destination);
  const size_t source = BlockOffset(layout, copy.source);
  const auto start = SteadyClock::now();
  Status copied = pool.storage.CopyRuns(destination, source, run_bytes,
                                        layout.bytes_per_head_run(), runs);
  if (copied.ok() && layout.quantized()) {
    copied = pool.storage.CopyRuns(destination + layout.bytes_of_values(),
                                   source + layout.bytes_of_values(),
                                   size_t{copy.tokens} * sizeof(float),
                                   size_t{layout.tokens_per_block()} * sizeof(float), runs);
  }
  counts_.copy_transfer += SteadyClock::now() - start;
  return copied;
}

void PoolTransfer::AddTo(WorkerStats& stats) const {
  stats.offloaded_blocks += counts_.offloaded_blocks;
  stats.offloaded_bytes += counts_.offloaded_bytes;
  stats.dropped_offloads += counts_.dropped_offloads;
  stats.landed_in_place += counts_.landed_in_place;
  stats.offload_transfer += counts_.offload_transfer;
  stats.onboard_transfer += counts_.onboard_transfer;
  stats.copy_transfer += counts_.copy_transfer;
  stats.offload_store += counts_.offload_store;
  stats.onboard_fetch += counts_.onboard_fetch;
}

}  // namespace kvtier::worker
