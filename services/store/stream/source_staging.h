// StageFromSource and HoldFromSource: a get's blocks that the node's tiers lack, from its
// extra source (a worker's pool), for an openGet ticket (at open, on the control thread)
// and a keyed get (before its send, on the stream's tier pool). Internal to
// services/store/stream.
//
// Thread safety: as the source's (a LoopBoundBlockSource from any thread); the staging
// pool is safe from any.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "common/block_key.h"
#include "common/status.h"
#include "services/store/extra_block_source.h"
#include "services/store/stream/staging_pool.h"
#include "services/store/stream/ticket_table.h"

namespace kvtier::store {

// The blocks `keys[i]` for i in `positions` (REQUIRES: each kMissing in `transfer`, whose
// format tag, salt scope, states and slots are set for `keys`), found (and where it can,
// held) by one HoldBatch. The blocks it does not hold are read by one ReadBatch into one
// staging buffer taken for them (`transfer.buffer`); those it holds apart (a GPU pool's)
// are copied into that buffer by one CopyHeld (one gather), on the caller's thread.
// StageFromSource copies the held ones into that buffer too, on the caller's thread, and
// gives their holds back (one ReleaseBatch) before it returns: a ticket may wait long,
// and holds nothing of the source meanwhile. HoldFromSource sends those held in host
// memory from the source's pages (GetSlot::held): the holds go with the transfer
// (`transfer.source_holds`, which shares `source`), to be given back once it is sent or
// dropped. Those held apart it first asks the source to stage (one StageHeld), and sends
// them from there (`transfer.staged_source`, kept as long as the holds); only where the
// source stages none are they copied by CopyHeld.
// Each block staged or held becomes kPresent, its header (the checksum of its bytes,
// computed here, on the caller's thread, where the source left it 0) in
// `transfer.headers`; a checksum computed for a held block goes back to the source with
// its hold (ReleaseBatch), for the source to keep. A block the source lacks, larger than
// `max_block_bytes`, gone since HoldBatch, or whose copy failed stays kMissing; one whose
// read or copy fails kDataLoss becomes kCorrupt.
// Staging's refusal (kResourceExhausted: full for now; kInvalidArgument: larger than the
// pool) is returned, nothing staged (HoldFromSource's holds stay with the transfer).
[[nodiscard]] Status StageFromSource(ExtraBlockSource& source, std::span<const BlockKey> keys,
                                     std::span<const uint32_t> positions, StagingPool& staging,
                                     uint64_t max_block_bytes, OpenTransfer& transfer);
[[nodiscard]] Status HoldFromSource(std::shared_ptr<ExtraBlockSource> source,
                                    std::span<const BlockKey> keys,
                                    std::span<const uint32_t> positions, StagingPool& staging,
                                    uint64_t max_block_bytes, OpenTransfer& transfer);

}  // namespace kvtier::store
