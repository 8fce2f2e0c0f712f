// SharedPoolMemory: the host memory behind a pool, shareable zero-copy with the inference
// processes of the node.
//
// A POSIX shared-memory object (shm_open) with an unguessable name ("/kvtier-pool-" and
// 128 random bits), mode 0600 so only processes of the same user can open it, sized and
// mapped by the worker. An inference process maps the same object with Map(name, bytes)
// and reads and writes the blocks in place: no byte crosses a socket. The worker unlinks
// the name when the memory goes; existing mappings stay valid until they are unmapped.
// A worker killed outright cannot unlink it, so its creator holds an exclusive flock on
// the object for as long as it lives: RemoveStale(), which every Create() runs first,
// unlinks each kvtier pool whose lock it can take (whose creator is gone). A lock, not a
// pid, so that it also holds across the PID namespaces of pods that share /dev/shm.
// On Kubernetes the inference container must share the worker pod's IPC namespace (or
// /dev/shm) to see the object; deploy/ says how.
//
// A GPU pool uses device memory and a CUDA IPC handle instead (gpu/).
//
// Thread safety: the mapping may be read and written from any thread; the object is
// move-only and unmaps on destruction.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace kvtier {

class SharedPoolMemory {
 public:
  // Creates and maps `bytes` of shared memory, zero-filled. kResourceExhausted when the
  // system refuses the size; kUnavailable when shared memory is not available at all.
  [[nodiscard]] static Result<SharedPoolMemory> Create(size_t bytes);
  // Maps an existing object by name (what an inference process does). kNotFound when the
  // name does not exist; kFailedPrecondition when it is smaller than `bytes`.
  [[nodiscard]] static Result<SharedPoolMemory> Map(const std::string& name, size_t bytes);

  // Unlinks the kvtier pools under `dir` (where shm_open's objects live) whose creator is
  // gone, but none changed within `min_age` (one just created, not yet locked).
  struct Removed {
    size_t pools = 0;
    uint64_t bytes = 0;
  };
  static Removed RemoveStale(const std::string& dir = "/dev/shm",
                             std::chrono::seconds min_age = std::chrono::seconds(2));

  SharedPoolMemory(SharedPoolMemory&& other) noexcept;
  SharedPoolMemory& operator=(SharedPoolMemory&& other) noexcept;
  SharedPoolMemory(const SharedPoolMemory&) = delete;
  SharedPoolMemory& operator=(const SharedPoolMemory&) = delete;
  ~SharedPoolMemory();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  SharedPoolMemory(std::string name, void* data, size_t size, int lock_fd)
      : name_(std::move(name)), data_(data), size_(size), owner_(lock_fd >= 0), lock_fd_(lock_fd) {}
  void Release();

  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool owner_ = false;  // the creator unlinks the name
  int lock_fd_ = -1;    // the creator's: open, holding the object's flock
};

}  // namespace kvtier
