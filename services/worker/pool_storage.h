// PoolStorage: the bytes behind one worker pool, where its blocks live.
//
//   host    SharedPoolMemory (POSIX shared memory): inference processes map it by name;
//           the worker reads and writes it directly.
//   device  gpu::SharedDeviceMemory on one GPU: inference processes open its CUDA IPC
//           handle; the worker moves bytes with the GPU's copy engine (through a block of
//           pinned staging memory for the offload and onboard paths).
//
// The worker's offload, onboard and copy-on-partial-reuse paths go through Read, Write and
// CopyWithin, so that they are the same code for both.
//
// Thread safety: one thread at a time (the worker's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvtier::worker {

// How an inference process maps the pool: by shared-memory name, or by CUDA IPC handle
// (64 bytes) on a device.
struct PoolMapping {
  std::string shared_memory_name;  // host pools
  std::string cuda_ipc_handle;     // device pools: cudaIpcMemHandle_t bytes
  int device_index = -1;           // device pools: the CUDA device; -1 for host pools
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
  [[nodiscard]] virtual Status CopyRuns(size_t destination, size_t source, size_t run_bytes, size_t pitch,
                                        size_t runs) = 0;

  // Batches of whole blocks, one transfer per batch (REQUIRES: ids inside the pool, no
  // repeats for WritableBlocks and CommitWrites, block_bytes a multiple of 16 for device
  // pools).
  // ReadBlocks: host-readable views of the blocks, in order, valid until the next batch
  // call: the pool memory itself (host), or pinned staging filled by one gather (device).
  [[nodiscard]] virtual Status ReadBlocks(std::span<const uint32_t> ids, size_t block_bytes,
                                          std::vector<std::span<const uint8_t>>* views) = 0;
  // WritableBlocks: where to put the blocks' new bytes (the pool itself, or staging);
  // CommitWrites then lands them (nothing for host pools, one scatter for device pools).
  [[nodiscard]] virtual Status WritableBlocks(std::span<const uint32_t> ids, size_t block_bytes,
                                              std::vector<std::span<uint8_t>>* views) = 0;
  [[nodiscard]] virtual Status CommitWrites(std::span<const uint32_t> ids, size_t block_bytes) = 0;
};

// Host shared memory, zero-filled.
[[nodiscard]] Result<std::unique_ptr<PoolStorage>> MakeHostPoolStorage(size_t bytes);
// Memory of GPU `device`, zero-filled; kUnavailable without a device or CUDA in the build,
// kResourceExhausted when the device has not that much free.
[[nodiscard]] Result<std::unique_ptr<PoolStorage>> MakeDevicePoolStorage(int device, size_t bytes);

}  // namespace kvtier::worker
