// DiskTier: blocks on local disk, the last tier of a node.
//
// Payloads live in append-only segment files of our own (storage/payload_segments.h),
// written once from the caller's buffers and read back straight into the caller's
// buffer; each block's header, with its payload's location, lives in RocksDB, in a
// column family per layout ("layout:<format tag>", keyed by block key), so that a
// layout's blocks are never read as another's. On open the tier scans only the headers
// to rebuild its eviction index and the segments' accounting: recovery reads no payload,
// and segments (or their tails) that no header references, written but never
// acknowledged, are deleted. Capacity is payload bytes; room is made by prioritized LRU
// (the same rules as every tier); a put that fails (a full disk, an I/O error) evicts
// nothing: the blocks it would have pushed out stay where they were in the order. Space
// of deleted payloads comes back when a segment holds no live block (deleted then) or
// through compaction: once dead bytes exceed a quarter of the live ones and
// `segment_bytes`, the sealed segment with the smallest live share has its blocks moved
// and is deleted, so the files hold at most about 1.25 times the live bytes plus a
// segment, and the headers' WAL about 1.1 times a 16 MiB write buffer (RocksDB
// preallocates it): size the volume for that.
//
// Why not RocksDB's BlobDB (an earlier layout of this tier): Debian 12's RocksDB computes CRC32C in
// software over every payload byte, once in the blob file and again in the WAL, which held puts to
// a fraction of the disk's speed
// (docs/history/benchmarks-2026-11.md#payload-segments-instead-of-blobdb-2026-11-23); the header's
// XXH3 already covers the payload. A database of the BlobDB layout (column families
// "blocks:<format>") is dropped at open, with a warning: the disk tier is a cache; one whose
// headers share a single "headers" family keeps its blocks (storage/header_families.h).
//
// Every Get recomputes the payload's XXH3-64 as it reads and compares it with the header:
// a block that fails is deleted, counted in checksum_failures, and answered kDataLoss.
// Wrong bytes are never returned.
//
// Durability (`sync`), what each policy loses. A put writes the payloads to their segment
// first and the headers after, so an acknowledged header never points at bytes that were
// not written; a deleted block's room is freed (its segment deleted once empty) only after
// the delete of its header is written, so no header outlives its segment either:
//   kWal (default): headers go through RocksDB's write-ahead log, payloads to the page
//     cache, neither fsynced. A killed process loses nothing acknowledged; a power loss or
//     kernel crash loses what the OS had not yet written back (seconds): a header that
//     survives without its payload reads as corrupt (kDataLoss, deleted), never wrong.
//   kFsync: the payloads' segment is fdatasynced, then the headers' WAL is synced, before
//     each acknowledgement. Nothing acknowledged is lost, even on power loss.
//   kNone: no WAL; headers not yet flushed from the memtable (up to `memtable_bytes`)
//     are lost on any crash, and their payloads become dead bytes. The store reports its
//     holdings after a restart, so the coordinator forgets what was lost.
//
// Errors: an unusable directory is kPermissionDenied or kFailedPrecondition with the
// path; a full disk is kResourceExhausted ("disk full") and the tier keeps serving reads.
// I/O errors are kUnavailable.
//
// Thread safety: safe from any thread. Changes (puts, removals, and compaction after the
// put that finds the debt) are serialised by a writer mutex, so that index, segments and
// RocksDB stay in step; a second mutex guards the index and the segments' bookkeeping
// only briefly: a put (or a compaction's move) reserves room under it and writes its
// payloads (and syncs them) outside it, and a get looks up under it and reads outside
// it, so reads never wait for a write's I/O. Put batches from several threads are
// written in groups (storage/put_group_queue.h): the batches that queue while one group
// is written go in the next, as one write with one pair of syncs under kFsync, where
// each would have paid its own (Stats(): put_batches against put_writes). A group's
// write that fails (a full disk) fails each of its batches, as it fails a batch's items.
#pragma once

#include <memory>
#include <string>

#include "common/clock.h"
#include "storage/tier.h"

namespace kvtier::storage {

enum class DiskSync : uint8_t { kNone, kWal, kFsync };
[[nodiscard]] Result<DiskSync> ParseDiskSync(std::string_view name);
[[nodiscard]] std::string_view DiskSyncName(DiskSync sync);

struct DiskTierOptions {
  std::string path;             // a directory; created when missing
  uint64_t capacity_bytes = 0;  // payload bytes
  uint64_t max_block_bytes = 256ull << 20;
  DiskSync sync = DiskSync::kWal;
  uint64_t memtable_bytes = 64ull << 20;  // the headers' memtable
  uint64_t segment_bytes = 64ull << 20;  // payload segments are sealed past this (1 MiB to 512 GiB)
  // Told of each eviction (no payload, see tier.h), of each put that stored or refreshed
  // a block, and of each block that left otherwise (a Remove; a payload found corrupt,
  // by a get or by compaction, and dropped), under the tier's locks: a block's changes
  // here are told in the order they happen.
  EvictionHandler on_evict;
  std::function<void(const BlockHeader&)> on_stored;
  std::function<void(const BlockHeader&)> on_removed;
  const Clock* clock = &SystemClock::Instance();
};

// The payload files on disk (for metrics and tests).
struct DiskFiles {
  size_t segments = 0;
  uint64_t file_bytes = 0;  // every segment's size
  uint64_t live_bytes = 0;  // payloads of stored blocks
  // Headers found at open whose payload was not on disk (a segment gone or cut short):
  // those blocks were dropped. Never after a process crash alone; after power loss only
  // under the sync policies that say so.
  uint64_t lost_at_open = 0;
};

class DiskTier final : public BlockTier {
 public:
  // Opens or creates the database and rebuilds the index from its headers.
  [[nodiscard]] static Result<std::unique_ptr<DiskTier>> Create(DiskTierOptions options);
  ~DiskTier() override;

  Tier kind() const override { return Tier::kDisk; }
  [[nodiscard]] Status Put(const BlockHeader& header, std::span<const uint8_t> payload) override;
  [[nodiscard]] Result<BlockHeader> Get(const BlockRef& ref, std::span<uint8_t> out) override;
  [[nodiscard]] Result<BlockHeader> Peek(const BlockRef& ref) override;
  [[nodiscard]] Status Remove(const BlockRef& ref) override;
  TierStats Stats() const override;
  [[nodiscard]] std::vector<Status> PutBatch(std::span<const PutItem> items) override;

  // The blocks that storing `header` would evict, in eviction order, after `pending_bytes`
  // more stored first (the batch being gathered before it): empty when it fits, or when
  // the block is stored already. The disk's admission asks before anything is written.
  std::vector<DisplacedBlock> DisplacedBy(const BlockHeader& header, uint64_t pending_bytes);

  // Makes everything written so far durable: syncs the segments and writes the headers'
  // memtable out.
  [[nodiscard]] Status Flush();
  DiskFiles Files() const;
  std::vector<BlockHeader> Headers() const override;

  class Impl;

 private:
  explicit DiskTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::storage
