// PayloadSegments: the disk tier's block payloads, in append-only segment files.
//
// Payloads are appended to the active segment (`<dir>/<id>.seg`, ids counting up): room
// is reserved (Reserve), then filled with one gathered write straight from the caller's
// buffers; they are read back with `pread` straight into the caller's buffer, hashed (XXH3-64) as
// they arrive, so a get touches its bytes once in user space. A segment is sealed when it reaches
// `segment_bytes`; the tier that owns the segments tells them which bytes are still referenced
// (`AddLive` at recovery, `Release` when a block leaves), and a sealed segment with nothing left is
// deleted. Space held by dead bytes of partly live segments comes back by moving their live blocks
// (the tier's compaction: see disk_tier.h).
//
// Why not RocksDB's blob files: Debian 12's RocksDB computes its CRC32C in software, over
// every payload byte at least once (the blob record) and once more with the WAL, which
// held puts far below the disk's speed (docs/benchmarks.md#disk-tier); the payloads carry an XXH3
// in their header already. RocksDB keeps the headers and these locations.
//
// A location packs the segment id (high 24 bits) and the byte offset (low 40 bits).
//
// Thread safety: not thread-safe; the owning tier calls every method under its lock.
// A SegmentFile (from File()) may be read from any thread, outside that lock: a deleted
// segment's file stays readable until its last SegmentFile reference goes.
//
// REQUIRES: segment_bytes at least 1 MiB and at most 2^40; one PayloadSegments per dir.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvtier::storage {

inline constexpr uint64_t MakeSegmentLocation(uint32_t segment, uint64_t offset) {
  return uint64_t{segment} << 40 | offset;
}
inline constexpr uint32_t SegmentOf(uint64_t location) {
  return static_cast<uint32_t>(location >> 40);
}
inline constexpr uint64_t OffsetOf(uint64_t location) {
  return location & ((uint64_t{1} << 40) - 1);
}

// One open segment file, shared by readers.
class SegmentFile {
 public:
  SegmentFile(uint32_t id, std::string path, int fd) : id_(id), path_(std::move(path)), fd_(fd) {}
  ~SegmentFile();
  SegmentFile(const SegmentFile&) = delete;
  SegmentFile& operator=(const SegmentFile&) = delete;

  // Reads out.size() bytes at `offset` into `out`; returns their XXH3-64. kUnavailable
  // (naming the file) on an I/O error or a short file.
  [[nodiscard]] Result<uint64_t> ReadHashed(uint64_t offset, std::span<uint8_t> out) const;
  // Writes the payloads one after another from `offset`, in one gathered write.
  // kResourceExhausted ("disk full"), kUnavailable on other I/O errors.
  [[nodiscard]] Status WriteAt(uint64_t offset,
                               std::span<const std::span<const uint8_t>> payloads) const;
  [[nodiscard]] Status Sync() const;           // fdatasync
  [[nodiscard]] Status SyncDirectory() const;  // fsync of the directory: a new file's name

  uint32_t id() const { return id_; }
  const std::string& path() const { return path_; }
  int fd() const { return fd_; }

 private:
  const uint32_t id_;
  const std::string path_;
  const int fd_;
};

struct PayloadSegmentsOptions {
  std::string dir;                       // created when missing
  uint64_t segment_bytes = 64ull << 20;  // a segment is sealed past this
};

class PayloadSegments {
 public:
  // Opens every segment in `dir` (none referenced yet: call AddLive for each stored
  // payload, then DropUnreferenced). kPermissionDenied / kFailedPrecondition for a
  // directory that cannot be used, naming it.
  [[nodiscard]] static Result<std::unique_ptr<PayloadSegments>> Open(
      PayloadSegmentsOptions options);
  ~PayloadSegments();

  // Recovery: the payload of `bytes` at `location` is stored. False when the location
  // lies outside every segment (a file lost or cut short): that payload is gone.
  bool AddLive(uint64_t location, uint64_t bytes);
  // Deletes the segments nothing references (written but never acknowledged, or left by
  // blocks that were deleted); a new active segment is started on the first Reserve.
  void DropUnreferenced();

  // Room for payloads of these sizes at the end of the active segment, counted live at
  // once. The caller writes them (Reservation::file->WriteAt, outside its lock: readers
  // are not held up by a put's I/O) and, if that fails, hands the room back (Abandon).
  struct Reservation {
    std::shared_ptr<const SegmentFile> file;
    uint64_t offset = 0;
    uint64_t bytes = 0;
    std::vector<uint64_t> locations;  // one per size
    bool new_segment = false;         // a file was created: file->SyncDirectory() makes it durable
  };
  [[nodiscard]] Result<Reservation> Reserve(std::span<const uint64_t> sizes);
  // The reserved room is not referenced: its bytes are dead (or reused, when nothing was
  // reserved after it).
  void Abandon(const Reservation& reservation);
  // fdatasync of every segment written since the last Sync (and of the directory, when a
  // segment was created: its name must survive a power loss too).
  [[nodiscard]] Status Sync();

  // The bytes at `location` are no longer referenced. A sealed segment with nothing left
  // is deleted.
  void Release(uint64_t location, uint64_t bytes);

  // The file of `segment`, or null when it does not exist (deleted, never written).
  std::shared_ptr<const SegmentFile> File(uint32_t segment) const;

  // The sealed segment with the smallest share of live bytes, when that share is below
  // `max_live_share`: the best one to compact.
  std::optional<uint32_t> SparsestSealed(double max_live_share) const;

  uint64_t file_bytes() const { return file_bytes_; }  // every segment's size on disk
  uint64_t live_bytes() const { return live_bytes_; }
  size_t segments() const { return segments_.size(); }

 private:
  struct Segment {
    std::shared_ptr<SegmentFile> file;
    uint64_t size = 0;  // bytes written
    uint64_t live = 0;  // bytes referenced
  };
  explicit PayloadSegments(PayloadSegmentsOptions options) : options_(std::move(options)) {}
  [[nodiscard]] Status StartSegment();
  void Delete(std::map<uint32_t, Segment>::iterator it);

  const PayloadSegmentsOptions options_;
  std::map<uint32_t, Segment> segments_;
  std::optional<uint32_t> active_;  // the segment appends go to
  std::vector<uint32_t> unsynced_;  // written since the last Sync
  bool dir_unsynced_ = false;       // a segment was created since the last Sync
  uint32_t next_id_ = 1;            // ids wrap around, skipping those in use
  uint64_t file_bytes_ = 0;
  uint64_t live_bytes_ = 0;
};

}  // namespace kvtier::storage
