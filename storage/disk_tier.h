// DiskTier: blocks on local disk in RocksDB, the last tier of a node.
//
// Payloads live in RocksDB blob files (integrated BlobDB: values are written once to a
// blob file at flush and the LSM keeps only a pointer), one column family per format tag
// so that a layout's blocks are never read as another's. Headers live in a small
// "headers" column family written in the same atomic WriteBatch; on open the tier scans
// only the headers to rebuild its eviction index, so recovery after a crash reads no
// payload. Capacity is payload bytes; room is made by prioritized LRU (the same rules as
// every tier) and evicted blocks are deleted (blob garbage collection reclaims the space).
//
// Every Get recomputes the payload's XXH3-64 and compares it with the header: a block
// that fails (or that RocksDB itself reports corrupt) is deleted, counted in
// checksum_failures, and answered kDataLoss. Wrong bytes are never returned.
//
// Durability (`sync`), what each policy loses:
//   kWal (default): every write goes to the write-ahead log before it is acknowledged,
//     not fsynced. A killed process loses nothing acknowledged; a power loss or kernel
//     crash loses the writes the OS had not yet written back (seconds). Payloads are
//     written twice (WAL, then blob file at flush).
//   kFsync: the WAL is fsynced before each acknowledgement. Nothing acknowledged is lost,
//     even on power loss; each write batch waits for the disk.
//   kNone: no WAL; payloads are written once. Anything not yet flushed from the memtable
//     (up to `memtable_bytes`) is lost on any crash. The store reports its holdings after
//     a restart, so the coordinator forgets what was lost; no wrong data is served.
//
// Errors: an unusable directory is kPermissionDenied or kFailedPrecondition with the
// path; a full disk is kResourceExhausted, and RocksDB then stops writes but keeps
// serving reads. I/O errors are kUnavailable.
//
// Thread safety: safe from any thread. Writes are serialised under one mutex (index and
// RocksDB stay in step); reads look up under the mutex and read outside it.
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
  std::string path;                         // a directory; created when missing
  uint64_t capacity_bytes = 0;              // payload bytes
  uint64_t max_block_bytes = 256ull << 20;
  DiskSync sync = DiskSync::kWal;
  uint64_t memtable_bytes = 64ull << 20;
  EvictionHandler on_evict;                 // told of each eviction; no payload (see tier.h)
  const Clock* clock = &SystemClock::Instance();
};

class DiskTier final : public Tier {
 public:
  // Opens or creates the database and rebuilds the index from its headers.
  [[nodiscard]] static Result<std::unique_ptr<DiskTier>> Create(DiskTierOptions options);
  ~DiskTier() override;

  TierKind kind() const override { return TierKind::kDisk; }
  [[nodiscard]] Status Put(const BlockHeader& header, std::span<const uint8_t> payload) override;
  [[nodiscard]] Result<BlockHeader> Get(const BlockRef& ref, std::span<uint8_t> out) override;
  [[nodiscard]] Result<BlockHeader> Peek(const BlockRef& ref) override;
  [[nodiscard]] Status Remove(const BlockRef& ref) override;
  TierStats Stats() const override;
  [[nodiscard]] std::vector<Status> PutBatch(std::span<const PutItem> items) override;

  // Writes the memtables out and waits (blob files then hold every payload).
  [[nodiscard]] Status Flush();
  std::vector<BlockHeader> Headers() const override;

  class Impl;

 private:
  explicit DiskTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::storage
