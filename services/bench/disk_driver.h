// The disk tier benchmark behind `kvtier bench disk`.
//
// In a fresh directory under `dir` (removed afterwards), on the same file system, both
// write sides timed to the durability the `sync` policy gives an acknowledged put:
//   raw write  `total_bytes` written sequentially to one file in block_bytes writes:
//              the ceiling for put. Under `fsync` an fdatasync follows every
//              batch_blocks writes (as the tier syncs each batch); under `wal` and `none`
//              nothing is synced (the tier acknowledges from the page cache too).
//   put        the same bytes as blocks of block_bytes through DiskTier::PutBatch in
//              batches of batch_blocks: what a storage node's clients see of its disk
//              tier. DiskTier::Flush follows, untimed, before the reads.
//   raw read   the raw file read back sequentially, cold: its pages are dropped from the
//              page cache first (posix_fadvise DONTNEED after the sync; no root needed).
//   get        every block read back in write order through DiskTier::Get (checksum
//              verified), cold in the same way.
// Rates are payload bytes over wall time. With `threads` above 1 each side splits its
// blocks into that many contiguous shares, one thread each (the raw sides `pwrite` and
// `pread` their share of the one file): a node whose clients put and get at once.
//
// Thread safety: a function of its inputs; writes total_bytes twice to `dir`.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace kvtier::bench {

struct DiskBenchOptions {
  std::string dir = ".";
  uint64_t total_bytes = 1ull << 30;
  uint64_t block_bytes = 2ull << 20;
  uint32_t batch_blocks = 8;
  std::string sync = "wal";  // none | wal | fsync (storage::DiskSync)
  uint32_t threads = 1;
};

struct DiskBenchResult {
  double put_gbps = 0;
  double get_gbps = 0;
  double raw_write_gbps = 0;  // at the policy's durability (see above)
  double raw_read_gbps = 0;
  uint64_t blocks = 0;
  // The put's PutBatch calls per write: above 1 where threads' batches were written
  // together (disk_tier.h, put groups).
  double put_batches_per_group = 0;
};

[[nodiscard]] Result<DiskBenchResult> RunDiskBench(const DiskBenchOptions& options);

}  // namespace kvtier::bench
