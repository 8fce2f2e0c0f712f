// PoolStorage: the bytes behind one worker pool, where its blocks live.
//
//   host    SharedPoolMemory (POSIX shared memory): inference processes map it by name;
//           the worker reads and writes it directly.
//   device  gpu::SharedDeviceMemory on one GPU: inference processes open its CUDA IPC
//           handle; the worker moves bytes with the GPU's copy engine (through pinned
//           staging memory, a bounded batch at a time: BatchLimit).
//
// The worker's offload, onboard and copy-on-partial-reuse paths go through the batch calls
// and CopyRuns, so that they are the same code for both.
//
// Thread safety: one thread at a time (the worker's), except CopyHeld, LandHeld, StageHeld
// and StageLanding: any thread, any number at once, beside the owner's calls (a device
// pool gives each concurrent caller a copier of its own: a kernel backend, with its own
// stream, and its own pinned staging).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/kernels.h"

namespace kvtier::worker {

// How an inference process maps the pool: by shared-memory name, or by CUDA IPC handle
// (64 bytes) on a device.
struct PoolMapping {
  std::string shared_memory_name;  // host pools
  std::string cuda_ipc_handle;     // device pools: cudaIpcMemHandle_t bytes
  int device_index = -1;           // device pools: the CUDA device; -1 for host pools
};

// Where a fetch writes the blocks it lands in a device pool: a copier's pinned staging,
// taken for the landing (views(): one block each, in the order of the ids staged), and
// Commit, which scatters the first `count` of them into their blocks. Any thread, one at
// a time; the copier goes back to the pool when this object goes.
class StagedLanding {
 public:
  virtual ~StagedLanding() = default;
  virtual const std::vector<std::span<uint8_t>>& views() const = 0;
  // kInvalidArgument: more than were staged.
  [[nodiscard]] virtual Status Commit(size_t count) = 0;
};

// Held blocks gathered into a copier's pinned staging, taken for a reader that sends them
// from there (StageHeld): views()[i] is the i-th block's bytes, unchanged until this
// object goes, which gives the copier back. Any thread, one at a time.
class StagedRead {
 public:
  virtual ~StagedRead() = default;
  virtual const std::vector<std::span<const uint8_t>>& views() const = 0;
};

class PoolStorage {
 public:
  virtual ~PoolStorage() = default;
  virtual size_t size() const = 0;
  virtual PoolMapping mapping() const = 0;
  // The pool as host memory; empty for device pools.
  virtual std::span<uint8_t> host_bytes() = 0;
  // REQUIRES (all three): the ranges lie inside the pool; source and destination of
  // CopyRuns do not overlap.
  [[nodiscard]] virtual Status Read(size_t offset, std::span<uint8_t> out) = 0;
  [[nodiscard]] virtual Status Write(size_t offset, std::span<const uint8_t> in) = 0;
  // `runs` runs of `run_bytes`, run i at offset + i * pitch, from source to destination
  // (copy-on-partial-reuse: the leading tokens of every head run of a block), one call.
  [[nodiscard]] virtual Status CopyRuns(size_t destination, size_t source, size_t run_bytes,
                                        size_t pitch, size_t runs) = 0;

  // Batches of whole blocks, one transfer per batch (REQUIRES: ids inside the pool, no
  // repeats for WritableBlocks and CommitWrites, block_bytes a multiple of 16 for device
  // pools, at most BatchLimit(block_bytes) ids: kInvalidArgument beyond).
  // BatchLimit: the most blocks one ReadBlocks or WritableBlocks call takes. A device
  // pool's staging for the owner's thread holds one copier's worth (at least one block),
  // so that a long sequence's onboard or a large eviction pins a bounded share of host
  // memory and goes in batches; a host pool has no limit.
  virtual size_t BatchLimit(size_t block_bytes) const = 0;
  // ReadBlocks: host-readable views of the blocks, in order, valid until the next batch
  // call: the pool memory itself (host), or pinned staging filled by one gather (device).
  [[nodiscard]] virtual Status ReadBlocks(std::span<const uint32_t> ids, size_t block_bytes,
                                          std::vector<std::span<const uint8_t>>* views) = 0;
  // WritableBlocks: where to put the blocks' new bytes (the pool itself, or staging);
  // CommitWrites then lands them (nothing for host pools, one scatter for device pools):
  // the first ids.size() of the blocks WritableBlocks was given, or with `only` (ascending
  // positions among them) just those, the others left as they are (blocks whose bytes
  // a fetch has already landed).
  [[nodiscard]] virtual Status WritableBlocks(std::span<const uint32_t> ids, size_t block_bytes,
                                              std::vector<std::span<uint8_t>>* views) = 0;
  [[nodiscard]] virtual Status CommitWrites(std::span<const uint32_t> ids, size_t block_bytes,
                                            std::span<const uint32_t> only = {}) = 0;

  // The blocks' bytes into `outs` (outs[i]: block ids[i], block_bytes long), in one batch
  // (one gather on a device), on the calling thread: a peer's fetch of blocks the worker
  // holds for it, copied off the worker's thread. REQUIRES: ids inside the pool; no one
  // writes these blocks until the call returns (the worker holds them: BlockPool::HoldBlocks).
  [[nodiscard]] virtual Status CopyHeld(std::span<const uint32_t> ids, size_t block_bytes,
                                        std::span<const std::span<uint8_t>> outs) = 0;
  // The reverse, into blocks held for a writer (BlockPool::HoldForWriting): ins[i] into
  // block ids[i], in one batch (one scatter on a device), on the calling thread: a peer
  // fetch's blocks landed off the worker's thread. REQUIRES: ids inside the pool, no
  // repeats; no one else reads or writes these blocks until the call returns.
  [[nodiscard]] virtual Status LandHeld(std::span<const uint32_t> ids, size_t block_bytes,
                                        std::span<const std::span<const uint8_t>> ins) = 0;
  // CopyHeld for a reader that sends the bytes on: one gather into a copier's pinned
  // staging, taken until the StagedRead goes, so that the bytes are not copied again on
  // the host. Any thread. kFailedPrecondition: a host pool (read its blocks in place);
  // kResourceExhausted: more than one round of a copier's staging, or as many reads
  // staged already as the pool allows (copy them by CopyHeld). REQUIRES: as CopyHeld's.
  [[nodiscard]] virtual Result<std::unique_ptr<StagedRead>> StageHeld(std::span<const uint32_t> ids,
                                                                      size_t block_bytes) = 0;
  // A copier's staging for blocks `ids`, held for a writer, for a fetch to write into
  // (so that its bytes arrive in pinned memory and need no copy before the scatter). Any
  // thread. kFailedPrecondition: a host pool (its blocks are written in place);
  // kResourceExhausted: more than one round of a copier's staging, or as many landings
  // staged already as the pool allows (land by LandHeld).
  // REQUIRES: as LandHeld's.
  [[nodiscard]] virtual Result<std::unique_ptr<StagedLanding>> StageLanding(
      std::span<const uint32_t> ids, size_t block_bytes) = 0;
};

// Host shared memory, zero-filled.
[[nodiscard]] Result<std::unique_ptr<PoolStorage>> MakeHostPoolStorage(size_t bytes);
// Memory of GPU `device`, zero-filled; kUnavailable without a device or CUDA in the build,
// kResourceExhausted when the device has not that much free.
[[nodiscard]] Result<std::unique_ptr<PoolStorage>> MakeDevicePoolStorage(int device, size_t bytes);

// Makes a kernel backend: one for the owner's thread (the pool's memory is its device
// memory) and one per concurrent CopyHeld caller.
using KernelBackendFactory = std::function<Result<std::unique_ptr<gpu::KernelBackend>>()>;
struct BackendPoolOptions {
  KernelBackendFactory make_backend;  // required
  size_t bytes = 0;
  // A copier's staging holds at most this much (at least one block): a larger CopyHeld or
  // LandHeld goes in rounds, so that each concurrent caller pins a bounded share of host
  // memory. The owner's thread's staging is bounded alike (BatchLimit). Copiers are made as callers
  // come at once and kept: on a worker node about one per thread that copies for peers (its
  // stream's tier threads, its fetch threads, its loop for tickets) and per staged landing: 15 with
  // the defaults on 16 cores, 480 MiB pinned at the most. 32 MiB: a fetch of 16 blocks of 2 MiB in
  // one round.
  size_t copier_staging_bytes = 32ull << 20;
  // Landings staged at once (StageLanding; kResourceExhausted beyond): each keeps a
  // copier until its fetch, which may wait in the fetcher's queue, has landed. 4: the
  // worker's two fetch threads and as many queued.
  uint32_t max_staged_landings = 4;
  // Reads staged at once (StageHeld; kResourceExhausted beyond): each keeps a copier
  // while its blocks are sent. 4: as many as the landings, so that staged reads and
  // landings together pin at most 256 MiB beyond the copiers that copy.
  uint32_t max_staged_reads = 4;
};
// A device pool over memory of the backends `make_backend` makes: the same code as
// MakeDevicePoolStorage's (staging, gathers, scatters, copiers), which with
// gpu::MakeCpuBackend runs on any machine, for tests. Its memory is the process's own: no
// other process can map it (mapping() names nothing). kInvalidArgument: no factory.
[[nodiscard]] Result<std::unique_ptr<PoolStorage>> MakeBackendPoolStorage(
    BackendPoolOptions options);
// Where a worker's pools keep their bytes: `bytes` of them for one pool.
using PoolStorageFactory = std::function<Result<std::unique_ptr<PoolStorage>>(size_t bytes)>;

}  // namespace kvtier::worker
