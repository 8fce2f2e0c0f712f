// SharedDeviceMemory: GPU memory behind a worker's pool that the inference processes of
// the node map zero-copy through CUDA IPC.
//
// The worker creates it (cudaMalloc, zero-filled) and hands out its IPC handle (64 opaque
// bytes, through the Worker capability's attachPool); an inference process on the same
// node and GPU opens the handle and reads and writes the blocks in place: no byte crosses
// a socket. The GPU counterpart of services/worker's SharedPoolMemory.
//
// CUDA's rules, which this class does not hide:
//   - a handle cannot be opened by the process that created it (kFailedPrecondition);
//   - the opener must see the same device, and share the creator's IPC namespace (on
//     Kubernetes: hostIPC on both pods, or one pod; deploy/README.md);
//   - the memory lives while the creator keeps it; an opener's mapping of freed memory
//     is undefined, so a worker frees its pools only after its clients have detached or
//     died (their connections are gone).
//
// Thread safety: the object is move-only; data() may be used from any thread with the
// CUDA runtime's usual rules. Builds without the CUDA sources answer kUnavailable.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kvtier::gpu {

// cudaIpcMemHandle_t as bytes (CUDA_IPC_HANDLE_SIZE), with a hex form for command lines.
struct IpcHandle {
  static constexpr size_t kBytes = 64;
  std::array<uint8_t, kBytes> bytes{};

  [[nodiscard]] std::string ToHex() const;
  // kInvalidArgument unless `hex` is exactly 128 hex digits.
  [[nodiscard]] static Result<IpcHandle> FromHex(std::string_view hex);
  // kInvalidArgument unless `raw` is exactly kBytes long (what the RPC carries).
  [[nodiscard]] static Result<IpcHandle> FromBytes(std::string_view raw);
};

class SharedDeviceMemory {
 public:
  // `bytes` of device memory on `device`, zero-filled, exportable. kResourceExhausted
  // when the device has not that much free; kUnavailable without a usable device.
  [[nodiscard]] static Result<SharedDeviceMemory> Create(int device, size_t bytes);
  // Maps another process's memory. REQUIRES: `bytes` is at most what the creator
  // allocated (the attachment's layout says how much). kFailedPrecondition for a handle
  // of this same process; kInvalidArgument for a handle CUDA does not accept.
  [[nodiscard]] static Result<SharedDeviceMemory> Open(int device, const IpcHandle& handle,
                                                       size_t bytes);

  SharedDeviceMemory() = default;
  SharedDeviceMemory(SharedDeviceMemory&& other) noexcept { *this = std::move(other); }
  SharedDeviceMemory& operator=(SharedDeviceMemory&& other) noexcept;
  SharedDeviceMemory(const SharedDeviceMemory&) = delete;
  SharedDeviceMemory& operator=(const SharedDeviceMemory&) = delete;
  ~SharedDeviceMemory() { Release(); }

  void* data() const { return data_; }
  size_t size() const { return size_; }
  int device() const { return device_; }
  const IpcHandle& handle() const { return handle_; }
  bool owner() const { return owner_; }

 private:
  SharedDeviceMemory(void* data, size_t size, int device, IpcHandle handle, bool owner)
      : data_(data), size_(size), device_(device), handle_(handle), owner_(owner) {}
  void Release();

  void* data_ = nullptr;
  size_t size_ = 0;
  int device_ = -1;
  IpcHandle handle_;
  bool owner_ = false;  // the creator frees; an opener closes its mapping
};

}  // namespace kvtier::gpu
