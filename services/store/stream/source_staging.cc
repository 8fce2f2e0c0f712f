#include "services/store/stream/source_staging.h"

#include <utility>
#include <vector>

namespace kvtier::store {

Status StageFromSource(ExtraBlockSource& source, std::span<const BlockKey> keys, std::span<const uint32_t> positions,
                       StagingPool& staging, uint64_t max_block_bytes, OpenTransfer& transfer) {
  std::vector<storage::BlockRef> refs;
  refs.reserve(positions.size());
  for (uint32_t i : positions) refs.push_back({keys[i], transfer.format_tag, transfer.salt_scope});
  const std::vector<Result<storage::BlockHeader>> peeked = source.PeekBatch(refs);
  std::vector<uint32_t> found;  // of `positions`: the source holds it
  uint64_t total = 0;
  for (uint32_t k = 0; k < positions.size(); ++k) {
    if (!peeked[k].ok() || peeked[k]->payload_bytes > max_block_bytes) continue;
    transfer.slots[positions[k]] = GetSlot{.offset = total, .bytes = peeked[k]->payload_bytes};
    total += peeked[k]->payload_bytes;
    found.push_back(k);
  }
  if (found.empty()) return Status::Ok();
  Result<StagingBuffer> taken = staging.Take(total);
  if (!taken.ok()) return taken.status().WithContext("staging the get's blocks outside the node's tiers");
  transfer.buffer = std::move(*taken);
  std::vector<storage::BlockRef> found_refs;
  std::vector<std::span<uint8_t>> outs;
  for (uint32_t k : found) {
    const GetSlot& slot = transfer.slots[positions[k]];
    found_refs.push_back(refs[k]);
    outs.push_back(transfer.buffer.bytes().subspan(slot.offset, slot.bytes));
  }
  std::vector<Result<storage::BlockHeader>> read = source.ReadBatch(found_refs, outs);
  for (size_t j = 0; j < found.size(); ++j) {
    const uint32_t i = positions[found[j]];
    if (read[j].ok() && read[j]->payload_bytes == outs[j].size()) {
      transfer.states[i] = StreamBlockState::kPresent;
      transfer.slots[i].header = static_cast<uint32_t>(transfer.headers.size());
      transfer.headers.push_back(WithChecksum(std::move(*read[j]), outs[j]));  // on the caller's thread
    } else if (!read[j].ok() && read[j].status().code() == StatusCode::kDataLoss) {
      transfer.states[i] = StreamBlockState::kCorrupt;
    }
  }
  return Status::Ok();
}

}  // namespace kvtier::store
