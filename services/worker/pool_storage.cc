#include "services/worker/pool_storage.h"

#include <cstring>

#include "gpu/kernels.h"
#include "gpu/shared_device_memory.h"
#include "services/worker/pool_memory.h"

namespace kvtier::worker {
namespace {

class HostPoolStorage final : public PoolStorage {
 public:
  explicit HostPoolStorage(SharedPoolMemory memory) : memory_(std::move(memory)) {}

  size_t size() const override { return memory_.size(); }
  PoolMapping mapping() const override {
    PoolMapping mapping;
    mapping.shared_memory_name = memory_.name();
    return mapping;
  }
  std::span<uint8_t> host_bytes() override { return {static_cast<uint8_t*>(memory_.data()), memory_.size()}; }

  Status Read(size_t offset, std::span<uint8_t> out) override {
    std::memcpy(out.data(), host_bytes().data() + offset, out.size());
    return Status::Ok();
  }
  Status Write(size_t offset, std::span<const uint8_t> in) override {
    std::memcpy(host_bytes().data() + offset, in.data(), in.size());
    return Status::Ok();
  }
  Status CopyRuns(size_t destination, size_t source, size_t run_bytes, size_t pitch, size_t runs) override {
    for (size_t i = 0; i < runs; ++i) {
      std::memcpy(host_bytes().data() + destination + i * pitch, host_bytes().data() + source + i * pitch, run_bytes);
    }
    return Status::Ok();
  }
  Status ReadBlocks(std::span<const uint32_t> ids, size_t block_bytes,
                    std::vector<std::span<const uint8_t>>* views) override {
    views->clear();
    for (uint32_t id : ids) views->push_back(host_bytes().subspan(size_t{id} * block_bytes, block_bytes));
    return Status::Ok();
  }
  Status WritableBlocks(std::span<const uint32_t> ids, size_t block_bytes,
                        std::vector<std::span<uint8_t>>* views) override {
    views->clear();
    for (uint32_t id : ids) views->push_back(host_bytes().subspan(size_t{id} * block_bytes, block_bytes));
    return Status::Ok();
  }
  Status CommitWrites(std::span<const uint32_t>, size_t) override { return Status::Ok(); }

 private:
  SharedPoolMemory memory_;
};

// Copies go through the CUDA backend's synchronous Copy: a block read for offload lands
// in the caller's host buffer, ready when Read returns.
class DevicePoolStorage final : public PoolStorage {
 public:
  DevicePoolStorage(gpu::SharedDeviceMemory memory, std::unique_ptr<gpu::KernelBackend> backend)
      : memory_(std::move(memory)), backend_(std::move(backend)) {}

  size_t size() const override { return memory_.size(); }
  PoolMapping mapping() const override {
    const auto& bytes = memory_.handle().bytes;
    PoolMapping mapping;
    mapping.cuda_ipc_handle.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    mapping.device_index = memory_.device();
    return mapping;
  }
  std::span<uint8_t> host_bytes() override { return {}; }

  Status Read(size_t offset, std::span<uint8_t> out) override {
    return backend_->Copy(out.data(), Base() + offset, out.size());
  }
  Status Write(size_t offset, std::span<const uint8_t> in) override {
    return backend_->Copy(Base() + offset, in.data(), in.size());
  }
  Status CopyRuns(size_t destination, size_t source, size_t run_bytes, size_t pitch, size_t runs) override {
    return backend_->Copy2D(Base() + destination, pitch, Base() + source, pitch, run_bytes, runs);
  }

  // One Gather kernel into pinned staging for the whole batch.
  Status ReadBlocks(std::span<const uint32_t> ids, size_t block_bytes,
                    std::vector<std::span<const uint8_t>>* views) override {
    views->clear();
    if (ids.empty()) return Status::Ok();
    KVTIER_RETURN_IF_ERROR(Stage(ids, block_bytes));
    KVTIER_RETURN_IF_ERROR(backend_->Gather(Args(ids, block_bytes)));
    for (size_t i = 0; i < ids.size(); ++i) views->push_back({staging_.as<uint8_t>() + i * block_bytes, block_bytes});
    return Status::Ok();
  }
  Status WritableBlocks(std::span<const uint32_t> ids, size_t block_bytes,
                        std::vector<std::span<uint8_t>>* views) override {
    views->clear();
    if (ids.empty()) return Status::Ok();
    KVTIER_RETURN_IF_ERROR(Stage(ids, block_bytes));
    for (size_t i = 0; i < ids.size(); ++i) views->push_back({staging_.as<uint8_t>() + i * block_bytes, block_bytes});
    return Status::Ok();
  }
  // One Scatter kernel from the staging WritableBlocks handed out.
  Status CommitWrites(std::span<const uint32_t> ids, size_t block_bytes) override {
    if (ids.empty()) return Status::Ok();
    return backend_->Scatter(Args(ids, block_bytes));
  }

 private:
  uint8_t* Base() const { return static_cast<uint8_t*>(memory_.data()); }

  // Pinned staging for `ids.size()` blocks and the ids in device memory, grown as needed
  // (never shrunk: batches repeat).
  Status Stage(std::span<const uint32_t> ids, size_t block_bytes) {
    const size_t bytes = ids.size() * block_bytes;
    if (staging_.size() < bytes) {
      KVTIER_ASSIGN_OR_RETURN(staging_, gpu::DeviceBuffer::Create(*backend_, gpu::MemoryKind::kStaging, bytes));
    }
    if (ids_.size() < ids.size_bytes()) {
      KVTIER_ASSIGN_OR_RETURN(ids_, gpu::DeviceBuffer::Create(*backend_, gpu::MemoryKind::kDevice, ids.size_bytes()));
    }
    return backend_->Copy(ids_.data(), ids.data(), ids.size_bytes());
  }

  gpu::BlockCopyArgs Args(std::span<const uint32_t> ids, size_t block_bytes) const {
    return {memory_.data(), memory_.size() / block_bytes, block_bytes, ids_.as<uint32_t>(),
            static_cast<uint32_t>(ids.size()), staging_.data()};
  }

  gpu::SharedDeviceMemory memory_;
  std::unique_ptr<gpu::KernelBackend> backend_;
  gpu::DeviceBuffer staging_;  // pinned host memory
  gpu::DeviceBuffer ids_;      // the batch's block ids, on the device
};

}  // namespace

Result<std::unique_ptr<PoolStorage>> MakeHostPoolStorage(size_t bytes) {
  KVTIER_ASSIGN_OR_RETURN(SharedPoolMemory memory, SharedPoolMemory::Create(bytes));
  return std::unique_ptr<PoolStorage>(new HostPoolStorage(std::move(memory)));
}

Result<std::unique_ptr<PoolStorage>> MakeDevicePoolStorage(int device, size_t bytes) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<gpu::KernelBackend> backend, gpu::MakeCudaBackend(device));
  KVTIER_ASSIGN_OR_RETURN(gpu::SharedDeviceMemory memory, gpu::SharedDeviceMemory::Create(device, bytes));
  return std::unique_ptr<PoolStorage>(new DevicePoolStorage(std::move(memory), std::move(backend)));
}

}  // namespace kvtier::worker
