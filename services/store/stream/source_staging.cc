#include "services/store/stream/source_staging.h"

#include <cstring>
#include <utility>
#include <vector>

#include "common/vector_growth.h"

namespace kvtier::store {
namespace {

// Slot i's block staged or held: present, with the header of the bytes in `bytes`.
void Found(OpenTransfer& transfer, uint32_t i, storage::BlockHeader header,
           std::span<const uint8_t> bytes) {
  transfer.states[i] = StreamBlockState::kPresent;
  transfer.slots[i].header = static_cast<uint32_t>(transfer.headers.size());
  transfer.headers.push_back(WithChecksum(std::move(header), bytes));  // on the caller's thread
}

// A read or copy of slot i's block that failed: corrupt where the source says the bytes
// are lost (kDataLoss), else left missing.
void NotFound(OpenTransfer& transfer, uint32_t i, const Status& failure) {
  if (failure.code() == StatusCode::kDataLoss) transfer.states[i] = StreamBlockState::kCorrupt;
}

// Appends k to `to`, which takes room for `at_most` at its first: one allocation where a
// get uses the vector, none where it does not.
void AddReserving(std::vector<uint32_t>& to, uint32_t k, size_t at_most) {
  if (to.capacity() == 0) to.reserve(at_most);
  to.push_back(k);
}

// Blocks of `found` (by their index k) and the staging each goes to.
struct Copies {
  std::vector<uint32_t> k;
  std::vector<std::span<uint8_t>> outs;
  // `at_most`: how many may still come, room for which the first one reserves.
  void Add(uint32_t index, std::span<uint8_t> out, size_t at_most) {
    if (k.capacity() == 0) {
      k.reserve(at_most);
      outs.reserve(at_most);
    }
    k.push_back(index);
    outs.push_back(out);
  }
};

// StageFromSource (`holds` its own, given back here) and HoldFromSource (`holds` the
// transfer's, kept: `send_held` sends the held blocks from the source's pages, or from
// its staging for those held apart where it stages them). Block k of the calls is the
// one at positions[k] of the get.
class FromSource {
 public:
  FromSource(ExtraBlockSource& source, SourceHolds& holds, bool send_held,
             std::span<const BlockKey> keys, std::span<const uint32_t> positions,
             OpenTransfer& transfer)
      : source_(source),
        holds_(holds),
        send_held_(send_held),
        positions_(positions),
        transfer_(transfer) {
    refs_.reserve(positions.size());
    for (uint32_t i : positions)
      refs_.push_back({keys[i], transfer.format_tag, transfer.salt_scope});
  }

  Status Run(StagingPool& staging, uint64_t max_block_bytes) {
    found_ = source_.HoldBatch(refs_);
    hold_of_.resize(positions_.size());
    // Each vector grows once, however many blocks the get has.
    holds_.Reserve(positions_.size());
    GrowFor(transfer_.headers, positions_.size());
    std::vector<uint32_t> staged;         // to be copied or read into staging
    std::vector<uint32_t> to_send_apart;  // held apart, to be sent from the source's staging
    for (uint32_t k = 0; k < positions_.size(); ++k) {
      if (!found_[k].ok()) continue;
      const std::span<const uint8_t> held = found_[k]->held;
      if (found_[k]->is_held()) hold_of_[k] = holds_.Add(found_[k]->hold);
      const uint64_t bytes = found_[k]->header.payload_bytes;
      if (bytes > max_block_bytes || (!held.empty() && held.size() != bytes)) continue;
      if (send_held_ && !held.empty()) {
        SendFrom(k, held);
      } else {
        AddReserving(send_held_ && found_[k]->held_apart ? to_send_apart : staged, k,
                     positions_.size() - k);
      }
    }
    if (!to_send_apart.empty() && !SendApartFromStaging(to_send_apart)) {
      staged.insert(staged.end(), to_send_apart.begin(), to_send_apart.end());
    }
    if (staged.empty()) return Status::Ok();
    return Stage(staged, staging);
  }

 private:
  // Into one staging buffer taken for them: the held blocks copied here, on this thread
  // (those held apart by one CopyHeld); the others read by the source.
  Status Stage(std::span<const uint32_t> staged, StagingPool& staging) {
    uint64_t total = 0;
    for (const uint32_t k : staged) {
      transfer_.slots[positions_[k]] =
          GetSlot{.offset = total, .bytes = found_[k]->header.payload_bytes};
      total += found_[k]->header.payload_bytes;
    }
    Result<StagingBuffer> taken = staging.Take(total);
    if (!taken.ok())
      return taken.status().WithContext("staging the get's blocks outside the node's tiers");
    transfer_.buffer = std::move(*taken);
    Copies apart, unheld;
    for (size_t j = 0; j < staged.size(); ++j) {
      const uint32_t k = staged[j];
      const GetSlot& slot = transfer_.slots[positions_[k]];
      const std::span<uint8_t> out = transfer_.buffer.bytes().subspan(slot.offset, slot.bytes);
      if (!found_[k]->held.empty()) {
        std::memcpy(out.data(), found_[k]->held.data(), out.size());
        HeldFound(k, out);
      } else {
        (found_[k]->held_apart ? apart : unheld).Add(k, out, staged.size() - j);
      }
    }
    if (!apart.k.empty()) CopyHeldApart(apart);
    if (!send_held_) holds_.Release();  // before the read, which waits for the source's loop too
    if (!unheld.k.empty()) ReadUnheld(unheld);
    return Status::Ok();
  }

  // Block k, held, sent from `bytes` (the source's pages or staging).
  void SendFrom(uint32_t k, std::span<const uint8_t> bytes) {
    transfer_.slots[positions_[k]] = GetSlot{.bytes = bytes.size(), .held = bytes};
    HeldFound(k, bytes);
  }

  // Found, for block k, which the source holds: a checksum computed here goes back to the
  // source with the hold, for it to keep.
  void HeldFound(uint32_t k, std::span<const uint8_t> bytes) {
    storage::BlockHeader& header = found_[k]->header;
    const bool computed = header.checksum == 0;
    Found(transfer_, positions_[k], std::move(header), bytes);
    if (computed) holds_.Computed(hold_of_[k], transfer_.headers.back().checksum);
  }

  std::vector<uint64_t> HoldsOf(std::span<const uint32_t> ks) const {
    std::vector<uint64_t> holds;
    holds.reserve(ks.size());
    for (const uint32_t k : ks) holds.push_back(found_[k]->hold);
    return holds;
  }

  // The blocks held apart (a GPU pool's), sent from where the source stages them
  // (StageHeld: a copier's, kept with the transfer until it is sent). False, nothing
  // done, where the source stages none (none to spare now, or no such thing) or its
  // staging does not match the holds (it goes with `staged`): they are copied instead.
  bool SendApartFromStaging(std::span<const uint32_t> apart) {
    Result<std::unique_ptr<StagedBlocks>> staged = source_.StageHeld(HoldsOf(apart));
    if (!staged.ok()) return false;
    const std::span<const std::span<const uint8_t>> views = (*staged)->views();
    if (views.size() != apart.size()) return false;
    for (size_t j = 0; j < apart.size(); ++j) {
      if (views[j].size() != found_[apart[j]]->header.payload_bytes) return false;
    }
    for (size_t j = 0; j < apart.size(); ++j) SendFrom(apart[j], views[j]);
    transfer_.staged_source = std::move(*staged);
    return true;
  }

  // The blocks held apart, copied by one CopyHeld on this thread.
  void CopyHeldApart(const Copies& apart) {
    const Status copied = source_.CopyHeld(HoldsOf(apart.k), apart.outs);
    for (size_t j = 0; j < apart.k.size(); ++j) {
      if (copied.ok()) {
        HeldFound(apart.k[j], apart.outs[j]);
      } else {
        NotFound(transfer_, positions_[apart.k[j]], copied);
      }
    }
  }

  // The blocks the source does not hold, read by one ReadBatch (on the source's loop).
  void ReadUnheld(const Copies& unheld) {
    std::vector<storage::BlockRef> unheld_refs;
    unheld_refs.reserve(unheld.k.size());
    for (const uint32_t k : unheld.k) unheld_refs.push_back(refs_[k]);
    std::vector<Result<storage::BlockHeader>> read = source_.ReadBatch(unheld_refs, unheld.outs);
    for (size_t j = 0; j < unheld.k.size(); ++j) {
      const uint32_t i = positions_[unheld.k[j]];
      if (!read[j].ok()) {
        NotFound(transfer_, i, read[j].status());
      } else if (read[j]->payload_bytes == unheld.outs[j].size()) {
        Found(transfer_, i, std::move(*read[j]), unheld.outs[j]);
      }
    }
  }

  ExtraBlockSource& source_;
  SourceHolds& holds_;
  const bool send_held_;
  const std::span<const uint32_t> positions_;
  OpenTransfer& transfer_;
  std::vector<storage::BlockRef> refs_;   // block k's
  std::vector<Result<HeldBlock>> found_;  // what HoldBatch said of block k
  std::vector<size_t> hold_of_;           // of a held block k: its index in `holds_`
};

}  // namespace

Status StageFromSource(ExtraBlockSource& source, std::span<const BlockKey> keys,
                       std::span<const uint32_t> positions, StagingPool& staging,
                       uint64_t max_block_bytes, OpenTransfer& transfer) {
  SourceHolds holds(source);  // given back by FromSource, or on the way out of an error
  return FromSource(source, holds, /*send_held=*/false, keys, positions, transfer)
      .Run(staging, max_block_bytes);
}

Status HoldFromSource(std::shared_ptr<ExtraBlockSource> source, std::span<const BlockKey> keys,
                      std::span<const uint32_t> positions, StagingPool& staging,
                      uint64_t max_block_bytes, OpenTransfer& transfer) {
  ExtraBlockSource& read_from = *source;
  transfer.source_holds = SourceHolds(std::move(source));
  return FromSource(read_from, transfer.source_holds, /*send_held=*/true, keys, positions, transfer)
      .Run(staging, max_block_bytes);
}

}  // namespace kvtier::store
