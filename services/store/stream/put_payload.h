// What a data stream put does with the payload it read, apart from the connection that
// reads it: the staged bytes cut into the batch's blocks (each checked before any is
// stored), the reserved host pages a payload read in place scatters into, and the one
// status a put's reply carries. Internal to services/store/stream.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <asio/buffer.hpp>

#include "common/status.h"
#include "storage/host_tier.h"
#include "storage/tier.h"

namespace kvtier::store {

// `headers`' blocks, in order, over `staged` (their payloads back to back), each checked
// (storage::ValidateBlock) and marked checksum-checked. The first that fails is the error,
// named "block i": nothing of the batch is stored.
// REQUIRES: staged.size() is the sum of the headers' payload_bytes.
[[nodiscard]] Result<std::vector<storage::PutItem>> StagedPutItems(
    std::span<const storage::BlockHeader> headers, std::span<const uint8_t> staged,
    uint64_t max_block_bytes);

// The reserved pages of every block of `reservation`, in payload order, into `out`
// (cleared first).
void ReservedPieces(const storage::HostReservation& reservation,
                    std::vector<asio::mutable_buffer>& out);

// OK when every block was stored; else the block that failed, named "block i": the cause,
// not the others of its batch refused with it (kAborted), unless those are all there is.
[[nodiscard]] Status PutOutcome(std::span<const Status> results);

}  // namespace kvtier::store
