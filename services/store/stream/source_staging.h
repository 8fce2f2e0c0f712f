// StageFromSource: a get's blocks that the node's tiers lack, copied from its extra source
// (a worker's pool) into staging, for an openGet ticket (at open, on the control thread)
// and a keyed get (before its send, on the stream's tier pool) alike. Internal to
// services/store/stream.
//
// Thread safety: as the source's (a LoopBoundBlockSource from any thread); the staging
// pool is safe from any.
#pragma once

#include <cstdint>
#include <span>

#include "common/block_key.h"
#include "common/status.h"
#include "services/store/extra_block_source.h"
#include "services/store/stream/staging_pool.h"
#include "services/store/stream/ticket_table.h"

namespace kvtier::store {

// The blocks `keys[i]` for i in `positions` (REQUIRES: each kMissing in `transfer`, whose
// format tag, salt scope, states and slots are set for `keys`), into one staging buffer
// taken for them all (`transfer.buffer`): found (and where it can, held) by one HoldBatch;
// the held ones copied here, on the caller's thread, then given back by one ReleaseBatch;
// the others read by one ReadBatch (one gather on a GPU pool). Each block staged becomes
// kPresent, its slot naming its bytes and its header (the checksum of the bytes staged,
// computed here where the source left it 0) in `transfer.headers`. A block the source
// lacks, larger than `max_block_bytes`, or gone since HoldBatch stays kMissing; one whose
// read fails kDataLoss becomes kCorrupt. Staging's refusal (kResourceExhausted: full for
// now; kInvalidArgument: larger than the pool) is returned, nothing held.
[[nodiscard]] Status StageFromSource(ExtraBlockSource& source, std::span<const BlockKey> keys,
                                     std::span<const uint32_t> positions, StagingPool& staging,
                                     uint64_t max_block_bytes, OpenTransfer& transfer);

}  // namespace kvtier::store
