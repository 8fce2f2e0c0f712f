#include "services/store/stream/source_staging.h"

#include <cstring>
#include <utility>
#include <vector>

namespace kvtier::store {
namespace {

// Slot i's block staged or held: present, with the header of the bytes in `bytes`.
void Found(OpenTransfer& transfer, uint32_t i, storage::BlockHeader header, std::span<const uint8_t> bytes) {
  transfer.states[i] = StreamBlockState::kPresent;
  transfer.slots[i].header = static_cast<uint32_t>(transfer.headers.size());
  transfer.headers.push_back(WithChecksum(std::move(header), bytes));  // on the caller's thread
}

// Found, for a block the source holds: a checksum computed here goes back to the source
// with the hold (`holds[hold]`), for it to keep.
void HeldFound(OpenTransfer& transfer, uint32_t i, storage::BlockHeader header, std::span<const uint8_t> bytes,
               SourceHolds& holds, size_t hold) {
  const bool computed = header.checksum == 0;
  Found(transfer, i, std::move(header), bytes);
  if (computed) holds.Computed(hold, transfer.headers.back().checksum);
}

// A read or copy of slot i's block that failed: corrupt where the source says the bytes
// are lost (kDataLoss), else left missing.
void NotFound(OpenTransfer& transfer, uint32_t i, const Status& failure) {
  if (failure.code() == StatusCode::kDataLoss) transfer.states[i] = StreamBlockState::kCorrupt;
}

// Blocks of `found` (by their index k) and the staging each goes to.
struct Copies {
  std::vector<uint32_t> k;
  std::vector<std::span<uint8_t>> outs;
  void Add(uint32_t index, std::span<uint8_t> out) {
    k.push_back(index);
    outs.push_back(out);
  }
};

// The blocks held apart (a GPU pool's), copied by one CopyHeld on this thread.
void CopyHeldApart(ExtraBlockSource& source, const Copies& apart, std::span<const uint32_t> positions,
                   std::vector<Result<HeldBlock>>& found, SourceHolds& holds, std::span<const size_t> hold_of,
                   OpenTransfer& transfer) {
  std::vector<uint64_t> apart_holds;
  for (const uint32_t k : apart.k) apart_holds.push_back(found[k]->hold);
  const Status copied = source.CopyHeld(apart_holds, apart.outs);
  for (size_t j = 0; j < apart.k.size(); ++j) {
    const uint32_t k = apart.k[j];
    if (!copied.ok()) {
      NotFound(transfer, positions[k], copied);
      continue;
    }
    HeldFound(transfer, positions[k], std::move(found[k]->header), apart.outs[j], holds, hold_of[k]);
  }
}

// The blocks held apart (`apart`, of `found`), for a transfer that sends them from where
// the source stages them (StageHeld: a GPU pool's copier, kept with the transfer until it
// is sent): each then sent from there. False, nothing done, where the source stages none
// (none to spare now, or no such thing): they are copied into the transfer's buffer.
bool SendApartFromStaging(ExtraBlockSource& source, std::span<const uint32_t> apart,
                          std::span<const uint32_t> positions, std::vector<Result<HeldBlock>>& found,
                          SourceHolds& holds, std::span<const size_t> hold_of, OpenTransfer& transfer) {
  std::vector<uint64_t> apart_holds;
  for (const uint32_t k : apart) apart_holds.push_back(found[k]->hold);
  Result<std::unique_ptr<StagedBlocks>> staged = source.StageHeld(apart_holds);
  if (!staged.ok()) return false;
  // A staging that does not match the holds is not sent from (it goes with `staged`).
  const std::span<const std::span<const uint8_t>> views = (*staged)->views();
  if (views.size() != apart.size()) return false;
  for (size_t j = 0; j < apart.size(); ++j) {
    if (views[j].size() != found[apart[j]]->header.payload_bytes) return false;
  }
  for (size_t j = 0; j < apart.size(); ++j) {
    const uint32_t k = apart[j];
    const uint32_t i = positions[k];
    transfer.slots[i] = GetSlot{.bytes = views[j].size(), .held = views[j]};
    HeldFound(transfer, i, std::move(found[k]->header), views[j], holds, hold_of[k]);
  }
  transfer.staged_source = std::move(*staged);
  return true;
}

// The blocks the source does not hold, read by one ReadBatch (on the source's loop).
void ReadUnheld(ExtraBlockSource& source, const Copies& unheld, std::span<const uint32_t> positions,
                std::span<const storage::BlockRef> refs, OpenTransfer& transfer) {
  std::vector<storage::BlockRef> unheld_refs;
  for (const uint32_t k : unheld.k) unheld_refs.push_back(refs[k]);
  std::vector<Result<storage::BlockHeader>> read = source.ReadBatch(unheld_refs, unheld.outs);
  for (size_t j = 0; j < unheld.k.size(); ++j) {
    const uint32_t i = positions[unheld.k[j]];
    if (!read[j].ok()) {
      NotFound(transfer, i, read[j].status());
    } else if (read[j]->payload_bytes == unheld.outs[j].size()) {
      Found(transfer, i, std::move(*read[j]), unheld.outs[j]);
    }
  }
}

// StageFromSource (`holds` its own, given back here) and HoldFromSource (`holds` the
// transfer's, kept: `send_held` sends the held blocks from the source's pages, or from
// its staging for those held apart where it stages them).
Status FromSource(ExtraBlockSource& source, SourceHolds& holds, bool send_held, std::span<const BlockKey> keys,
                  std::span<const uint32_t> positions, StagingPool& staging, uint64_t max_block_bytes,
                  OpenTransfer& transfer) {
  std::vector<storage::BlockRef> refs;
  refs.reserve(positions.size());
  for (uint32_t i : positions) refs.push_back({keys[i], transfer.format_tag, transfer.salt_scope});
  std::vector<Result<HeldBlock>> found = source.HoldBatch(refs);
  std::vector<uint32_t> staged;  // of `positions`: to be copied or read into staging
  std::vector<uint32_t> to_send_apart;  // of `positions`: held apart, to be sent from the source's staging
  std::vector<size_t> hold_of(positions.size());  // of a held block: its index in `holds`
  for (uint32_t k = 0; k < positions.size(); ++k) {
    if (!found[k].ok()) continue;
    const std::span<const uint8_t> held = found[k]->held;
    if (found[k]->is_held()) hold_of[k] = holds.Add(found[k]->hold);
    const uint64_t bytes = found[k]->header.payload_bytes;
    if (bytes > max_block_bytes || (!held.empty() && held.size() != bytes)) continue;
    const uint32_t i = positions[k];
    if (send_held && !held.empty()) {
      transfer.slots[i] = GetSlot{.bytes = bytes, .held = held};
      HeldFound(transfer, i, std::move(found[k]->header), held, holds, hold_of[k]);
      continue;
    }
    (send_held && found[k]->held_apart ? to_send_apart : staged).push_back(k);
  }
  if (!to_send_apart.empty() &&
      !SendApartFromStaging(source, to_send_apart, positions, found, holds, hold_of, transfer)) {
    staged.insert(staged.end(), to_send_apart.begin(), to_send_apart.end());
  }
  if (staged.empty()) return Status::Ok();
  uint64_t total = 0;
  for (const uint32_t k : staged) {
    transfer.slots[positions[k]] = GetSlot{.offset = total, .bytes = found[k]->header.payload_bytes};
    total += found[k]->header.payload_bytes;
  }
  Result<StagingBuffer> taken = staging.Take(total);
  if (!taken.ok()) return taken.status().WithContext("staging the get's blocks outside the node's tiers");
  transfer.buffer = std::move(*taken);
  // The held blocks are copied here, on this thread (those held apart by one CopyHeld);
  // the others are read by the source.
  Copies apart, unheld;
  for (uint32_t k : staged) {
    const uint32_t i = positions[k];
    const std::span<uint8_t> out = transfer.buffer.bytes().subspan(transfer.slots[i].offset, transfer.slots[i].bytes);
    if (!found[k]->held.empty()) {
      std::memcpy(out.data(), found[k]->held.data(), out.size());
      HeldFound(transfer, i, std::move(found[k]->header), out, holds, hold_of[k]);
    } else {
      (found[k]->held_apart ? apart : unheld).Add(k, out);
    }
  }
  if (!apart.k.empty()) CopyHeldApart(source, apart, positions, found, holds, hold_of, transfer);
  if (!send_held) holds.Release();  // before the read, which waits for the source's loop too
  if (!unheld.k.empty()) ReadUnheld(source, unheld, positions, refs, transfer);
  return Status::Ok();
}

}  // namespace

Status StageFromSource(ExtraBlockSource& source, std::span<const BlockKey> keys, std::span<const uint32_t> positions,
                       StagingPool& staging, uint64_t max_block_bytes, OpenTransfer& transfer) {
  SourceHolds holds(source);  // given back by FromSource, or on the way out of an error
  return FromSource(source, holds, /*send_held=*/false, keys, positions, staging, max_block_bytes, transfer);
}

Status HoldFromSource(std::shared_ptr<ExtraBlockSource> source, std::span<const BlockKey> keys,
                      std::span<const uint32_t> positions, StagingPool& staging, uint64_t max_block_bytes,
                      OpenTransfer& transfer) {
  ExtraBlockSource& read_from = *source;
  transfer.source_holds = SourceHolds(std::move(source));
  return FromSource(read_from, transfer.source_holds, /*send_held=*/true, keys, positions, staging, max_block_bytes,
                    transfer);
}

}  // namespace kvtier::store
