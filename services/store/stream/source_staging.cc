#include "services/store/stream/source_staging.h"

#include <cstring>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

namespace kvtier::store {
namespace {

// Gives the source's holds back once the stage is done with them, whatever the way out.
class Holds {
 public:
  explicit Holds(ExtraBlockSource& source) : source_(source) {}
  Holds(const Holds&) = delete;
  Holds& operator=(const Holds&) = delete;
  ~Holds() { Release(); }

  void Add(uint64_t hold) { holds_.push_back(hold); }
  void Release() {
    if (holds_.empty()) return;
    // A failure leaves a block unevictable until its node restarts, nothing worse; the
    // bytes staged are good either way. kUnavailable: the source's loop has exited.
    if (const Status released = source_.ReleaseBatch(holds_);
        !released.ok() && released.code() != StatusCode::kUnavailable) {
      spdlog::warn("releasing {} blocks held for a get: {}", holds_.size(), released.ToString());
    }
    holds_.clear();
  }

 private:
  ExtraBlockSource& source_;
  std::vector<uint64_t> holds_;
};

// Slot i's block staged: present, with the header of the bytes in `out`.
void Staged(OpenTransfer& transfer, uint32_t i, storage::BlockHeader header, std::span<const uint8_t> out) {
  transfer.states[i] = StreamBlockState::kPresent;
  transfer.slots[i].header = static_cast<uint32_t>(transfer.headers.size());
  transfer.headers.push_back(WithChecksum(std::move(header), out));  // on the caller's thread
}

}  // namespace

Status StageFromSource(ExtraBlockSource& source, std::span<const BlockKey> keys, std::span<const uint32_t> positions,
                       StagingPool& staging, uint64_t max_block_bytes, OpenTransfer& transfer) {
  std::vector<storage::BlockRef> refs;
  refs.reserve(positions.size());
  for (uint32_t i : positions) refs.push_back({keys[i], transfer.format_tag, transfer.salt_scope});
  std::vector<Result<HeldBlock>> found = source.HoldBatch(refs);
  Holds holds(source);
  std::vector<uint32_t> staged;  // of `positions`: the source holds it or can read it
  uint64_t total = 0;
  for (uint32_t k = 0; k < positions.size(); ++k) {
    if (!found[k].ok()) continue;
    if (!found[k]->held.empty()) holds.Add(found[k]->hold);
    const uint64_t bytes = found[k]->header.payload_bytes;
    if (bytes > max_block_bytes || (!found[k]->held.empty() && found[k]->held.size() != bytes)) continue;
    transfer.slots[positions[k]] = GetSlot{.offset = total, .bytes = bytes};
    total += bytes;
    staged.push_back(k);
  }
  if (staged.empty()) return Status::Ok();
  Result<StagingBuffer> taken = staging.Take(total);
  if (!taken.ok()) return taken.status().WithContext("staging the get's blocks outside the node's tiers");
  transfer.buffer = std::move(*taken);
  // The held blocks are copied here, on this thread; the others are read by the source.
  std::vector<uint32_t> unheld;
  std::vector<storage::BlockRef> unheld_refs;
  std::vector<std::span<uint8_t>> outs;
  for (uint32_t k : staged) {
    const uint32_t i = positions[k];
    const std::span<uint8_t> out = transfer.buffer.bytes().subspan(transfer.slots[i].offset, transfer.slots[i].bytes);
    if (!found[k]->held.empty()) {
      std::memcpy(out.data(), found[k]->held.data(), out.size());
      Staged(transfer, i, std::move(found[k]->header), out);
    } else {
      unheld.push_back(i);
      unheld_refs.push_back(refs[k]);
      outs.push_back(out);
    }
  }
  holds.Release();
  if (unheld.empty()) return Status::Ok();
  std::vector<Result<storage::BlockHeader>> read = source.ReadBatch(unheld_refs, outs);
  for (size_t j = 0; j < unheld.size(); ++j) {
    if (read[j].ok() && read[j]->payload_bytes == outs[j].size()) {
      Staged(transfer, unheld[j], std::move(*read[j]), outs[j]);
    } else if (!read[j].ok() && read[j].status().code() == StatusCode::kDataLoss) {
      transfer.states[unheld[j]] = StreamBlockState::kCorrupt;
    }
  }
  return Status::Ok();
}

}  // namespace kvtier::store
