// BlockTier: one level of kvtier's block storage below the GPU pools (host memory, disk).
//
// A tier keeps whole blocks, each a BlockHeader and its payload, indexed by (format tag,
// key). Put validates the block (header fields, payload size, checksum) and stores it,
// evicting by prioritized LRU when it needs room; what it evicts is handed to the
// tier's eviction handler (the next tier down, or nothing). Get copies a payload into
// the caller's buffer after verifying its checksum: a block that fails the check is
// deleted and reported kDataLoss, never returned. A read under a salt scope other than
// the stored one answers kNotFound, as for an absent block.
//
// Status codes: kInvalidArgument (a malformed block or a too-small buffer: fix and
// retry), kNotFound (absent), kResourceExhausted (larger than the whole tier),
// kDataLoss (corrupt), kUnavailable/kInternal (I/O errors; see each implementation).
//
// Thread safety: every method of every implementation is safe from any thread.
// Eviction handlers run on the thread that called Put, under the tier's lock; they
// must not call back into the same tier (lock order: host tier before disk tier).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/block_vocabulary.h"
#include "common/status.h"
#include "storage/block_header.h"

namespace kvtier::storage {

struct TierStats {
  uint64_t blocks = 0;
  uint64_t bytes = 0;  // payload bytes stored (host: pages in use)
  uint64_t capacity_bytes = 0;
  uint64_t medium_bytes = 0;  // taken on the medium: the host slab; the disk's segment
                              // files, dead bytes included (see disk_tier.h)
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t puts = 0;
  uint64_t evictions = 0;
  uint64_t evictions_by_priority[101] = {};
  uint64_t checksum_failures = 0;
  uint64_t io_errors = 0;      // reads and writes the medium failed (not misses, not corruption)
  uint64_t bytes_written = 0;  // payload bytes of blocks stored (not refreshes of stored ones)
  uint64_t bytes_read = 0;     // payload bytes of hits
  // Put calls (PutBatch, Put) and the writes they went out in. The disk tier writes the
  // batches that queue meanwhile together (disk_tier.h), so put_writes <= put_batches
  // there and their ratio is the mean group; the host tier leaves both 0.
  uint64_t put_batches = 0;
  uint64_t put_writes = 0;
  // Host: pages whose memory was replaced before reuse because a zero-copy send lent them
  // and its reader never said it read them (PinnedBlock::UnpinLent).
  uint64_t lent_pages_replaced = 0;
};

// An evicted block: its header (retention as still left) and its payload as one or more
// byte ranges, valid only during the call. The disk tier, last in a node's chain, hands
// no payload (reading it back only to drop it would cost a disk read per eviction).
using EvictionHandler = std::function<void(const BlockHeader& header,
                                           std::span<const std::span<const uint8_t>> payload)>;

// The blocks one put evicts, handed on together (the host tier's victims move down to
// disk in one write): each header with its payload's byte ranges, valid during the call.
struct EvictedBlockView {
  const BlockHeader* header = nullptr;
  std::span<const std::span<const uint8_t>> payload;
};
using BatchEvictionHandler = std::function<void(std::span<const EvictedBlockView> victims)>;

// A stored block that a put would evict to make room (DiskTier::DisplacedBy).
struct DisplacedBlock {
  BlockKey key;
  uint8_t priority = 0;  // effective: the default once its retention ran out
};

struct PutItem {
  BlockHeader header;
  std::span<const uint8_t> payload;
  // The caller has just checked `payload` against header.checksum (the data stream does,
  // for every block of a transfer before any is stored): the tier skips its own XXH3
  // pass over the bytes; every other check stays. Leave false unless the bytes were
  // hashed since they last changed.
  bool checksum_checked = false;
};

// ValidateBlock, without the checksum pass where `checksum_checked` (PutItem's) says
// the caller made it.
[[nodiscard]] Status ValidatePut(const BlockHeader& header, std::span<const uint8_t> payload,
                                 bool checksum_checked, uint64_t max_payload_bytes);

struct GetItem {
  BlockRef ref;
  std::span<uint8_t> out;  // at least the payload size
};

class BlockTier {
 public:
  virtual ~BlockTier() = default;

  virtual Tier kind() const = 0;

  // Stores the block, replacing one with the same (format tag, key). A block is
  // immutable for its key, so a replacement updates the policy fields (priority,
  // retention) and the recency.
  [[nodiscard]] virtual Status Put(const BlockHeader& header, std::span<const uint8_t> payload) = 0;
  // Copies the payload into `out` and returns its header.
  [[nodiscard]] virtual Result<BlockHeader> Get(const BlockRef& ref, std::span<uint8_t> out) = 0;
  // The header of a stored block without its payload (kNotFound as Get).
  [[nodiscard]] virtual Result<BlockHeader> Peek(const BlockRef& ref) = 0;
  virtual bool Contains(const BlockRef& ref) { return Peek(ref).ok(); }
  // kNotFound when absent or under another salt scope. Any other error leaves the block
  // stored and readable.
  [[nodiscard]] virtual Status Remove(const BlockRef& ref) = 0;
  virtual TierStats Stats() const = 0;
  // Every stored block's header (retention as still left), for a snapshot of holdings.
  virtual std::vector<BlockHeader> Headers() const = 0;

  // Batched forms: one result per item, in order. Implementations may do better than a
  // loop (the disk tier writes one RocksDB batch).
  [[nodiscard]] virtual std::vector<Status> PutBatch(std::span<const PutItem> items);
  [[nodiscard]] virtual std::vector<Result<BlockHeader>> GetBatch(std::span<const GetItem> items);
};

}  // namespace kvtier::storage
