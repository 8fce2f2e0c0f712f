#include "services/worker/pool_storage.h"

#include <cstring>
#include <limits>

#include "common/shared_pool_memory.h"

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
  std::span<uint8_t> host_bytes() override {
    return {static_cast<uint8_t*>(memory_.data()), memory_.size()};
  }

  Status Read(size_t offset, std::span<uint8_t> out) override {
    std::memcpy(out.data(), host_bytes().data() + offset, out.size());
    return Status::Ok();
  }
  Status Write(size_t offset, std::span<const uint8_t> in) override {
    std::memcpy(host_bytes().data() + offset, in.data(), in.size());
    return Status::Ok();
  }
  Status CopyRuns(size_t destination, size_t source, size_t run_bytes, size_t pitch,
                  size_t runs) override {
    for (size_t i = 0; i < runs; ++i) {
      std::memcpy(host_bytes().data() + destination + i * pitch,
                  host_bytes().data() + source + i * pitch, run_bytes);
    }
    return Status::Ok();
  }
  size_t BatchLimit(size_t) const override {
    return std::numeric_limits<size_t>::max();
  }  // views of the pool itself
  Status ReadBlocks(std::span<const uint32_t> ids, size_t block_bytes,
                    std::vector<std::span<const uint8_t>>* views) override {
    views->clear();
    views->reserve(ids.size());
    for (uint32_t id : ids)
      views->push_back(host_bytes().subspan(size_t{id} * block_bytes, block_bytes));
    return Status::Ok();
  }
  Status WritableBlocks(std::span<const uint32_t> ids, size_t block_bytes,
                        std::vector<std::span<uint8_t>>* views) override {
    views->clear();
    views->reserve(ids.size());
    for (uint32_t id : ids)
      views->push_back(host_bytes().subspan(size_t{id} * block_bytes, block_bytes));
    return Status::Ok();
  }
  Status CommitWrites(std::span<const uint32_t>, size_t, std::span<const uint32_t>) override {
    return Status::Ok();
  }
  Status CopyHeld(std::span<const uint32_t> ids, size_t block_bytes,
                  std::span<const std::span<uint8_t>> outs) override {
    const auto* base = static_cast<const uint8_t*>(memory_.data());
    for (size_t i = 0; i < ids.size(); ++i)
      std::memcpy(outs[i].data(), base + size_t{ids[i]} * block_bytes, block_bytes);
    return Status::Ok();
  }
  Status LandHeld(std::span<const uint32_t> ids, size_t block_bytes,
                  std::span<const std::span<const uint8_t>> ins) override {
    auto* base = static_cast<uint8_t*>(memory_.data());
    for (size_t i = 0; i < ids.size(); ++i)
      std::memcpy(base + size_t{ids[i]} * block_bytes, ins[i].data(), block_bytes);
    return Status::Ok();
  }
  Result<std::unique_ptr<StagedRead>> StageHeld(std::span<const uint32_t>, size_t) override {
    return FailedPreconditionError(
        "a host pool's blocks are read in place: no staging to read from");
  }
  Result<std::unique_ptr<StagedLanding>> StageLanding(std::span<const uint32_t>, size_t) override {
    return FailedPreconditionError(
        "a host pool's blocks are written in place: no staging to land in");
  }

 private:
  SharedPoolMemory memory_;
};

}  // namespace

Result<std::unique_ptr<PoolStorage>> MakeHostPoolStorage(size_t bytes) {
  KVTIER_ASSIGN_OR_RETURN(SharedPoolMemory memory, SharedPoolMemory::Create(bytes));
  return std::unique_ptr<PoolStorage>(new HostPoolStorage(std::move(memory)));
}

}  // namespace kvtier::worker
