#include "services/bench/disk_driver.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "common/scratch_dir.h"
#include "storage/disk_tier.h"

namespace kvtier::bench {
namespace {

using Seconds = std::chrono::duration<double>;

double Gbps(uint64_t bytes, Seconds elapsed) {
  return static_cast<double>(bytes) / elapsed.count() / 1e9;
}

Status Errno(const std::string& what) {
  return UnavailableError(what + ": " + std::strerror(errno));
}

// Drops the clean pages of every regular file under `path` from the page cache.
void DropFromPageCache(const std::filesystem::path& path) {
  for (const auto& entry : std::filesystem::recursive_directory_iterator(path)) {
    if (!entry.is_regular_file()) continue;
    const int fd = open(entry.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
}

// A directory that removes itself.
// Runs fn(first, end) over `threads` contiguous shares of blocks [0, blocks), one thread
// each; the first error any share returns.
Status RunShares(uint32_t threads, uint64_t blocks,
                 const std::function<Status(uint64_t, uint64_t)>& fn) {
  if (threads <= 1) return fn(0, blocks);
  std::vector<Status> results(threads);
  std::vector<std::thread> workers;
  for (uint32_t t = 0; t < threads; ++t) {
    workers.emplace_back(
        [&, t] { results[t] = fn(blocks * t / threads, blocks * (t + 1) / threads); });
  }
  for (std::thread& worker : workers) worker.join();
  for (Status& result : results) KVTIER_RETURN_IF_ERROR(result);
  return Status::Ok();
}

// `sync_every`: an fdatasync after every that many blocks a share writes (0: none, the
// writes are timed into the page cache). The file is synced, untimed, before the read.
Result<std::pair<double, double>> RawWriteRead(const std::filesystem::path& file,
                                               const std::vector<uint8_t>& data,
                                               const DiskBenchOptions& options,
                                               uint32_t sync_every) {
  const int fd = open(file.c_str(), O_CREAT | O_TRUNC | O_RDWR, 0600);
  if (fd < 0) return Errno("creating " + file.string());
  const uint64_t blocks = options.total_bytes / options.block_bytes;
  const uint64_t bytes = blocks * options.block_bytes;
  const auto start = std::chrono::steady_clock::now();
  Status written = RunShares(options.threads, blocks, [&](uint64_t first, uint64_t end) {
    for (uint64_t i = first; i < end; ++i) {
      const uint64_t at = i * options.block_bytes;
      if (pwrite(fd, data.data() + at % data.size(), options.block_bytes, static_cast<off_t>(at)) !=
          static_cast<ssize_t>(options.block_bytes)) {
        return Errno("writing " + file.string());
      }
      const bool batch_done =
          sync_every != 0 && ((i - first + 1) % sync_every == 0 || i + 1 == end);
      if (batch_done && fdatasync(fd) != 0) return Errno("syncing " + file.string());
    }
    return Status::Ok();
  });
  const double write_gbps = Gbps(bytes, std::chrono::steady_clock::now() - start);
  if (written.ok() && fdatasync(fd) != 0) written = Errno("syncing " + file.string());
  if (!written.ok()) {
    close(fd);
    return written;
  }
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  const auto read_start = std::chrono::steady_clock::now();
  // Each reader opens the file itself: the kernel's read-ahead follows one descriptor's
  // reads, and shares of one descriptor would look random to it.
  const Status read = RunShares(options.threads, blocks, [&](uint64_t first, uint64_t end) {
    const int reader = open(file.c_str(), O_RDONLY);
    if (reader < 0) return Errno("opening " + file.string());
    std::vector<uint8_t> buffer(options.block_bytes);
    Status status;
    for (uint64_t i = first; i < end && status.ok(); ++i) {
      if (pread(reader, buffer.data(), buffer.size(),
                static_cast<off_t>(i * options.block_bytes)) !=
          static_cast<ssize_t>(buffer.size())) {
        status = Errno("reading " + file.string());
      }
    }
    close(reader);
    return status;
  });
  const double read_gbps = Gbps(bytes, std::chrono::steady_clock::now() - read_start);
  close(fd);
  KVTIER_RETURN_IF_ERROR(read);
  return std::pair{write_gbps, read_gbps};
}

// The blocks both sides move: 64 MiB of random bytes (or less) cut into block-sized
// slots, block i being slot i mod slots (the disk tier neither compresses nor
// deduplicates, so repeats cost the disk what distinct bytes would), with their headers.
struct BenchBlocks {
  std::vector<uint8_t> data;
  uint64_t block_bytes = 0;
  uint64_t slots = 0;
  std::vector<storage::BlockHeader> headers;

  std::span<const uint8_t> payload(uint64_t i) const {
    return std::span<const uint8_t>(data).subspan((i % slots) * block_bytes, block_bytes);
  }
};

BenchBlocks MakeBlocks(const DiskBenchOptions& options) {
  BenchBlocks blocks;
  blocks.block_bytes = options.block_bytes;
  blocks.data.resize(std::max<uint64_t>(options.block_bytes,
                                        std::min<uint64_t>(options.total_bytes, 64ull << 20)));
  std::mt19937_64 rng(42);
  for (size_t i = 0; i + 8 <= blocks.data.size(); i += 8) {
    const uint64_t word = rng();
    std::memcpy(blocks.data.data() + i, &word, 8);
  }
  blocks.slots = blocks.data.size() / options.block_bytes;
  blocks.headers.resize(options.total_bytes / options.block_bytes);
  for (uint64_t i = 0; i < blocks.headers.size(); ++i) {
    storage::BlockHeader& h = blocks.headers[i];
    h.key = BlockKey{0x5EED, i};
    h.parent = BlockKey{0x5EED, i - 1};
    h.format_tag = "bench|" + std::to_string(options.block_bytes);
    h.salt_scope = 1;
    h.payload_bytes = options.block_bytes;
    h.checksum = i < blocks.slots ? storage::PayloadChecksum(blocks.payload(i))
                                  : blocks.headers[i % blocks.slots].checksum;
  }
  return blocks;
}

struct TierRates {
  double put_gbps = 0;
  double get_gbps = 0;
  double put_batches_per_group = 0;
};

// The disk tier's sustained put and, after an untimed flush, from a cold page cache, get.
Result<TierRates> TierPutGet(const std::string& path, const BenchBlocks& blocks,
                             const DiskBenchOptions& options, storage::DiskSync sync) {
  storage::DiskTierOptions disk_options;
  disk_options.path = path;
  disk_options.capacity_bytes = options.total_bytes * 2;
  disk_options.max_block_bytes = options.block_bytes;
  disk_options.sync = sync;
  KVTIER_ASSIGN_OR_RETURN(auto tier, storage::DiskTier::Create(disk_options));
  const uint64_t count = blocks.headers.size(), bytes = count * options.block_bytes;
  const auto put_start = std::chrono::steady_clock::now();
  KVTIER_RETURN_IF_ERROR(RunShares(options.threads, count, [&](uint64_t first, uint64_t end) {
    std::vector<storage::PutItem> batch;
    for (uint64_t i = first; i < end; i += options.batch_blocks) {
      batch.clear();
      for (uint64_t j = i; j < std::min<uint64_t>(end, i + options.batch_blocks); ++j) {
        batch.push_back(storage::PutItem{blocks.headers[j], blocks.payload(j)});
      }
      for (const Status& status : tier->PutBatch(batch)) KVTIER_RETURN_IF_ERROR(status);
    }
    return Status::Ok();
  }));
  const double put_gbps = Gbps(bytes, std::chrono::steady_clock::now() - put_start);
  KVTIER_RETURN_IF_ERROR(tier->Flush());

  DropFromPageCache(path);
  const auto get_start = std::chrono::steady_clock::now();
  KVTIER_RETURN_IF_ERROR(RunShares(options.threads, count, [&](uint64_t first, uint64_t end) {
    std::vector<uint8_t> out(options.block_bytes);
    for (uint64_t i = first; i < end; ++i) {
      const storage::BlockHeader& h = blocks.headers[i];
      KVTIER_RETURN_IF_ERROR(
          tier->Get(storage::BlockRef{h.key, h.format_tag, h.salt_scope}, out).status());
    }
    return Status::Ok();
  }));
  const storage::TierStats stats = tier->Stats();
  return TierRates{.put_gbps = put_gbps,
                   .get_gbps = Gbps(bytes, std::chrono::steady_clock::now() - get_start),
                   .put_batches_per_group = static_cast<double>(stats.put_batches) /
                                            static_cast<double>(stats.put_writes)};
}

}  // namespace

Result<DiskBenchResult> RunDiskBench(const DiskBenchOptions& options) {
  if (options.block_bytes == 0 || options.total_bytes < options.block_bytes) {
    return InvalidArgumentError("--total-bytes must hold at least one block of --block-bytes");
  }
  if (options.threads == 0 || options.threads > options.total_bytes / options.block_bytes) {
    return InvalidArgumentError("--threads must be between 1 and the number of blocks");
  }
  KVTIER_ASSIGN_OR_RETURN(const storage::DiskSync sync, storage::ParseDiskSync(options.sync));
  KVTIER_ASSIGN_OR_RETURN(const ScratchDir made,
                          ScratchDir::Create("kvtier-bench-disk", options.dir));
  const std::filesystem::path scratch = made.path();

  const BenchBlocks blocks = MakeBlocks(options);
  DiskBenchResult result;
  result.blocks = blocks.headers.size();
  const uint32_t sync_every = sync == storage::DiskSync::kFsync ? options.batch_blocks : 0;
  KVTIER_ASSIGN_OR_RETURN(auto raw,
                          RawWriteRead(scratch / "raw", blocks.data, options, sync_every));
  result.raw_write_gbps = raw.first;
  result.raw_read_gbps = raw.second;
  std::filesystem::remove(scratch / "raw");
  KVTIER_ASSIGN_OR_RETURN(auto tier,
                          TierPutGet((scratch / "tier").string(), blocks, options, sync));
  result.put_gbps = tier.put_gbps;
  result.get_gbps = tier.get_gbps;
  result.put_batches_per_group = tier.put_batches_per_group;
  return result;
}

}  // namespace kvtier::bench
