// ExtraBlockSource: blocks a node holds outside its tiers (a worker's pool), which its
// BlockStore serves to peers after the tiers miss. Read-only.
//
// Thread safety: called only on the thread that serves the node's BlockStore capability
// (its RPC event loop); implementations may rely on that. The data stream's keyed gets,
// served on the stream's threads, reach such a source through a LoopBoundBlockSource
// (services/store/rpc/loop_bound_block_source.h), which runs each call on that loop.
// Held blocks (HoldBatch) are the exception: any thread may read their bytes, or copy
// them (CopyHeld, StageHeld), until the hold is released.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "storage/block_header.h"

namespace kvtier::store {

// A block as HoldBatch finds it: its header and, where the source holds it, `hold`, its
// bytes unchanged until ReleaseBatch gives the hold back. Held in host memory, `held` is
// its bytes there; held where other threads cannot read in place (`held_apart`: a GPU
// pool's), CopyHeld copies it out. Neither: not held; Read or ReadBatch copies it.
struct HeldBlock {
  storage::BlockHeader header;
  std::span<const uint8_t> held = {};
  bool held_apart = false;
  uint64_t hold = 0;  // with `held` or `held_apart`: the source's name for the hold

  bool is_held() const { return !held.empty() || held_apart; }
};

// Blocks held apart, gathered by their source into memory of its own that a caller reads
// in place (StageHeld): views()[i] is the i-th hold's bytes, unchanged until this object
// goes. Any thread, one at a time.
class StagedBlocks {
 public:
  virtual ~StagedBlocks() = default;
  virtual std::span<const std::span<const uint8_t>> views() const = 0;
};

class ExtraBlockSource {
 public:
  virtual ~ExtraBlockSource() = default;
  // Peek: the header of the block `ref` names, kNotFound when this source lacks it. Read:
  // the payload into `out` (REQUIRES: out.size() == payload_bytes) and the header. Either
  // may leave the checksum 0 where the source keeps none (a pool: computing it means
  // hashing the payload); whoever serves the bytes read then computes it from them
  // (WithChecksum), on its own thread: a source's thread (a worker's loop) is not held
  // for the hash.
  [[nodiscard]] virtual Result<storage::BlockHeader> Peek(const storage::BlockRef& ref) = 0;
  [[nodiscard]] virtual Result<storage::BlockHeader> Read(const storage::BlockRef& ref,
                                                          std::span<uint8_t> out) = 0;
  // Peek of several blocks, one result each (kNotFound as Peek); where the source can, it
  // also holds each block found, so that the caller reads its bytes in place on its own
  // thread (a keyed get sends them from there) and the source's thread is not held for a
  // copy (a worker's host pool). The caller gives every hold back, each once, by
  // ReleaseBatch calls. The default holds nothing.
  [[nodiscard]] virtual std::vector<Result<HeldBlock>> HoldBatch(
      std::span<const storage::BlockRef> refs) {
    std::vector<Result<HeldBlock>> results;
    results.reserve(refs.size());
    for (const storage::BlockRef& ref : refs) {
      Result<storage::BlockHeader> header = Peek(ref);
      results.push_back(header.ok() ? Result<HeldBlock>(HeldBlock{.header = std::move(*header)})
                                    : header.status());
    }
    return results;
  }
  // Gives back the holds HoldBatch took (each once); their bytes may change from then on.
  // `checksums`: empty, or one per hold: the XXH3 the caller computed of the held bytes
  // where the source had left it 0 (0: not computed). A source may keep it as the block's
  // header checksum for as long as the block stays as it was (a pool: while committed), so
  // that the next reader need not hash it again.
  [[nodiscard]] virtual Status ReleaseBatch(std::span<const uint64_t> holds,
                                            [[maybe_unused]] std::span<const uint64_t> checksums) {
    if (holds.empty()) return Status::Ok();
    return InternalError("this source holds no blocks, yet " + std::to_string(holds.size()) +
                         " holds came back");
  }
  // The bytes of blocks held apart (HoldBatch's `held_apart`) into `outs`, one block each
  // (REQUIRES: holds.size() == outs.size(), each out that block's size), all at once (a
  // GPU pool: one gather). Unlike the other calls, on the caller's thread, any thread, while
  // the source's own goes on: what a source that holds blocks apart offers instead of its
  // thread's time. kDataLoss: the bytes could not be read (nothing is to be sent of them).
  // The default holds nothing apart.
  [[nodiscard]] virtual Status CopyHeld(std::span<const uint64_t> holds,
                                        [[maybe_unused]] std::span<const std::span<uint8_t>> outs) {
    return InternalError("this source holds no blocks apart, yet " + std::to_string(holds.size()) +
                         " holds came to be copied");
  }
  // CopyHeld for a caller that sends the bytes on: the blocks gathered where the source
  // keeps them for the caller to read in place until the StagedBlocks goes (a GPU pool: a
  // copier's pinned staging, one gather), so that they are not copied again on the host.
  // Any thread, as CopyHeld. kResourceExhausted: none to spare now (copy them by
  // CopyHeld); kDataLoss as CopyHeld's. The default stages nothing (kUnimplemented).
  [[nodiscard]] virtual Result<std::unique_ptr<StagedBlocks>> StageHeld(
      std::span<const uint64_t> holds) {
    return UnimplementedError("this source stages no blocks; " + std::to_string(holds.size()) +
                              " held blocks are to be copied");
  }
  // Read of several blocks (REQUIRES: refs.size() == outs.size()), one result each. A
  // source whose blocks move in batches (a GPU pool: one gather for all) overrides it.
  [[nodiscard]] virtual std::vector<Result<storage::BlockHeader>> ReadBatch(
      std::span<const storage::BlockRef> refs, std::span<const std::span<uint8_t>> outs) {
    std::vector<Result<storage::BlockHeader>> results;
    results.reserve(refs.size());
    for (size_t i = 0; i < refs.size(); ++i) results.push_back(Read(refs[i], outs[i]));
    return results;
  }
};

// A header read from an ExtraBlockSource, with the checksum of `payload` (the bytes read)
// where the source left it 0.
inline storage::BlockHeader WithChecksum(storage::BlockHeader header,
                                         std::span<const uint8_t> payload) {
  if (header.checksum == 0) header.checksum = storage::PayloadChecksum(payload);
  return header;
}

}  // namespace kvtier::store
