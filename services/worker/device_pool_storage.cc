// A pool in the memory of a kernel backend: a GPU's (MakeDevicePoolStorage: CUDA IPC
// shareable) or, for tests, the CPU reference backend's (MakeBackendPoolStorage). Bytes
// move in batches through pinned staging: one Gather or Scatter kernel per batch.
//
// The owner's thread (the worker's loop) uses one lane: a backend (its own CUDA stream),
// staging and a device copy of the batch's ids. Every lane's staging holds one round at
// most (BatchLimit blocks, copier_staging_bytes): the loop's batches and the copiers'
// rounds alike. Each CopyHeld or LandHeld, called by other threads at once, takes a lane
// of its own from `idle_` (made on first need, kept for the next caller), so that no copy
// waits for the loop's and the loop waits for none.
// A staged landing (StageLanding) keeps its lane until it goes: a fetch writes into the
// lane's staging, and Commit scatters it. So does a staged read (StageHeld): one gather
// into the lane's staging, which the stream sends from.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <variant>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "gpu/kernels.h"
#include "gpu/shared_device_memory.h"
#include "services/worker/pool_storage.h"

namespace kvtier::worker {
namespace {

struct Lane {
  std::unique_ptr<gpu::KernelBackend> backend;
  gpu::DeviceBuffer staging = {};  // pinned host memory, grown as needed (batches repeat)
  gpu::DeviceBuffer ids = {};      // the batch's block ids, on the device

  // Staging for `ids.size()` blocks, and the ids copied to the device.
  Status Stage(std::span<const uint32_t> batch, size_t block_bytes) {
    const size_t bytes = batch.size() * block_bytes;
    if (staging.size() < bytes) {
      staging = gpu::DeviceBuffer();  // the old one goes first: pinned memory is scarce
      KVTIER_ASSIGN_OR_RETURN(
          staging, gpu::DeviceBuffer::Create(*backend, gpu::MemoryKind::kStaging, bytes));
    }
    if (ids.size() < batch.size_bytes()) {
      KVTIER_ASSIGN_OR_RETURN(
          ids, gpu::DeviceBuffer::Create(*backend, gpu::MemoryKind::kDevice, batch.size_bytes()));
    }
    return backend->Copy(ids.data(), batch.data(), batch.size_bytes());
  }
  std::span<uint8_t> Staged(size_t i, size_t block_bytes) const {
    return {staging.as<uint8_t>() + i * block_bytes, block_bytes};
  }
};

class DevicePoolStorage;

// What a copier is kept for, until the object that keeps it goes: a fetch's landing or a
// peer's read. Each kind has its own limit (BackendPoolOptions).
enum class Staging : uint8_t { kLanding = 0, kRead = 1 };

// A copier kept for a staged landing or read, given back (EndStaged) when this goes, and
// one view per block staged in its staging.
class KeptCopier {
 public:
  KeptCopier(DevicePoolStorage& pool, Staging kind, std::unique_ptr<Lane> lane)
      : pool_(pool), kind_(kind), lane_(std::move(lane)) {}
  KeptCopier(const KeptCopier&) = delete;
  KeptCopier& operator=(const KeptCopier&) = delete;
  ~KeptCopier();
  const Lane& lane() const { return *lane_; }
  template <typename View>
  std::vector<View> Views(size_t blocks, size_t block_bytes) const {
    std::vector<View> views;
    for (size_t i = 0; i < blocks; ++i) views.push_back(lane_->Staged(i, block_bytes));
    return views;
  }

 private:
  DevicePoolStorage& pool_;
  const Staging kind_;
  std::unique_ptr<Lane> lane_;
};

// A copier taken for a fetch's landing, its ids staged; scattered by Commit.
class DeviceLanding final : public StagedLanding {
 public:
  DeviceLanding(DevicePoolStorage& pool, std::unique_ptr<Lane> lane, size_t blocks,
                size_t block_bytes)
      : pool_(pool),
        copier_(pool, Staging::kLanding, std::move(lane)),
        block_bytes_(block_bytes),
        views_(copier_.Views<std::span<uint8_t>>(blocks, block_bytes)) {}
  const std::vector<std::span<uint8_t>>& views() const override { return views_; }
  Status Commit(size_t count) override;

 private:
  const DevicePoolStorage& pool_;
  const KeptCopier copier_;
  const size_t block_bytes_;
  const std::vector<std::span<uint8_t>> views_;
};

// A copier taken for a peer's read, its blocks gathered into its staging.
class DeviceRead final : public StagedRead {
 public:
  DeviceRead(DevicePoolStorage& pool, std::unique_ptr<Lane> lane, size_t blocks, size_t block_bytes)
      : copier_(pool, Staging::kRead, std::move(lane)),
        views_(copier_.Views<std::span<const uint8_t>>(blocks, block_bytes)) {}
  const std::vector<std::span<const uint8_t>>& views() const override { return views_; }

 private:
  const KeptCopier copier_;
  const std::vector<std::span<const uint8_t>> views_;
};

class DevicePoolStorage final : public PoolStorage {
 public:
  using Memory = std::variant<gpu::SharedDeviceMemory, gpu::DeviceBuffer>;

  // REQUIRES: `memory` is memory of `backend` (or of its device).
  DevicePoolStorage(BackendPoolOptions options, std::unique_ptr<gpu::KernelBackend> backend,
                    Memory memory)
      : make_backend_(std::move(options.make_backend)),
        copier_staging_bytes_(options.copier_staging_bytes),
        lane_{.backend = std::move(backend)},
        memory_(std::move(memory)),
        max_staged_{options.max_staged_landings, options.max_staged_reads} {}

  size_t size() const override {
    return std::visit([](const auto& m) { return m.size(); }, memory_);
  }
  PoolMapping mapping() const override {
    PoolMapping mapping;
    if (const auto* shared = std::get_if<gpu::SharedDeviceMemory>(&memory_)) {
      const auto& bytes = shared->handle().bytes;
      mapping.cuda_ipc_handle.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      mapping.device_index = shared->device();
    }
    return mapping;
  }
  std::span<uint8_t> host_bytes() override { return {}; }

  Status Read(size_t offset, std::span<uint8_t> out) override {
    return lane_.backend->Copy(out.data(), Base() + offset, out.size());
  }
  Status Write(size_t offset, std::span<const uint8_t> in) override {
    return lane_.backend->Copy(Base() + offset, in.data(), in.size());
  }
  Status CopyRuns(size_t destination, size_t source, size_t run_bytes, size_t pitch,
                  size_t runs) override {
    return lane_.backend->Copy2D(Base() + destination, pitch, Base() + source, pitch, run_bytes,
                                 runs);
  }

  size_t BatchLimit(size_t block_bytes) const override {
    return std::max<size_t>(1, copier_staging_bytes_ / block_bytes);
  }
  // One Gather kernel into the lane's staging for the whole batch.
  Status ReadBlocks(std::span<const uint32_t> ids, size_t block_bytes,
                    std::vector<std::span<const uint8_t>>* views) override {
    views->clear();
    if (ids.empty()) return Status::Ok();
    KVTIER_RETURN_IF_ERROR(StageBatch(ids, block_bytes));
    KVTIER_RETURN_IF_ERROR(lane_.backend->Gather(Args(lane_, ids, block_bytes)));
    views->reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) views->push_back(lane_.Staged(i, block_bytes));
    return Status::Ok();
  }
  Status WritableBlocks(std::span<const uint32_t> ids, size_t block_bytes,
                        std::vector<std::span<uint8_t>>* views) override {
    views->clear();
    if (ids.empty()) return Status::Ok();
    KVTIER_RETURN_IF_ERROR(StageBatch(ids, block_bytes));
    views->reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) views->push_back(lane_.Staged(i, block_bytes));
    return Status::Ok();
  }
  // One Scatter kernel from the staging WritableBlocks handed out (REQUIRES: `ids` are
  // the ones it was given, or the first of them); with `only` some of
  // them (fewer than all), those slots are moved to the front of the staging first (a
  // memmove in pinned host memory) and their ids staged again, so that the scatter writes
  // those blocks alone.
  Status CommitWrites(std::span<const uint32_t> ids, size_t block_bytes,
                      std::span<const uint32_t> only) override {
    if (only.empty() || only.size() == ids.size()) {  // ascending positions: all of them
      if (ids.empty()) return Status::Ok();
      return lane_.backend->Scatter(Args(lane_, ids, block_bytes));
    }
    std::vector<uint32_t> kept;
    for (size_t k = 0; k < only.size(); ++k) {
      if (only[k] != k) {
        std::memmove(lane_.Staged(k, block_bytes).data(), lane_.Staged(only[k], block_bytes).data(),
                     block_bytes);
      }
      kept.push_back(ids[only[k]]);
    }
    KVTIER_RETURN_IF_ERROR(
        lane_.backend->Copy(lane_.ids.data(), kept.data(), std::span(kept).size_bytes()));
    return lane_.backend->Scatter(Args(lane_, kept, block_bytes));
  }

  // On a lane of the caller's own: one Gather per round of at most copier_staging_bytes_.
  Status CopyHeld(std::span<const uint32_t> ids, size_t block_bytes,
                  std::span<const std::span<uint8_t>> outs) override {
    return InRounds(
        ids, block_bytes, [&](Lane& lane, std::span<const uint32_t> round, size_t first) -> Status {
          KVTIER_RETURN_IF_ERROR(lane.backend->Gather(Args(lane, round, block_bytes)));
          for (size_t i = 0; i < round.size(); ++i) {
            std::copy_n(lane.Staged(i, block_bytes).data(), block_bytes, outs[first + i].data());
          }
          return Status::Ok();
        });
  }
  // Likewise: one Scatter per round.
  Status LandHeld(std::span<const uint32_t> ids, size_t block_bytes,
                  std::span<const std::span<const uint8_t>> ins) override {
    return InRounds(
        ids, block_bytes, [&](Lane& lane, std::span<const uint32_t> round, size_t first) -> Status {
          for (size_t i = 0; i < round.size(); ++i) {
            std::copy_n(ins[first + i].data(), block_bytes, lane.Staged(i, block_bytes).data());
          }
          return lane.backend->Scatter(Args(lane, round, block_bytes));
        });
  }

 private:
  uint8_t* Base() const {
    return static_cast<uint8_t*>(std::visit([](const auto& m) { return m.data(); }, memory_));
  }
  // The owner's lane staged for a batch of at most BatchLimit blocks.
  Status StageBatch(std::span<const uint32_t> ids, size_t block_bytes) {
    if (ids.size() > BatchLimit(block_bytes)) {
      return InvalidArgumentError(
          "a batch of " + std::to_string(ids.size()) + " blocks of " + std::to_string(block_bytes) +
          " bytes exceeds the pool's limit of " + std::to_string(BatchLimit(block_bytes)));
    }
    return lane_.Stage(ids, block_bytes);
  }
  gpu::BlockCopyArgs Args(const Lane& lane, std::span<const uint32_t> ids,
                          size_t block_bytes) const {
    return {Base(),
            size() / block_bytes,
            block_bytes,
            lane.ids.as<uint32_t>(),
            static_cast<uint32_t>(ids.size()),
            lane.staging.data()};
  }

  // One round's worth at most, on a copier kept by the landing until it goes; at most
  // max_staged_landings at once (a landing waits for its fetch, which may be queued).
  Result<std::unique_ptr<StagedLanding>> StageLanding(std::span<const uint32_t> ids,
                                                      size_t block_bytes) override {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Lane> lane,
                            TakeStaged(Staging::kLanding, ids, block_bytes));
    return std::unique_ptr<StagedLanding>(
        new DeviceLanding(*this, std::move(lane), ids.size(), block_bytes));
  }
  // Likewise, kept by the read while its blocks are sent; one Gather.
  Result<std::unique_ptr<StagedRead>> StageHeld(std::span<const uint32_t> ids,
                                                size_t block_bytes) override {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Lane> lane,
                            TakeStaged(Staging::kRead, ids, block_bytes));
    const Status gathered = lane->backend->Gather(Args(*lane, ids, block_bytes));
    if (!gathered.ok()) {
      EndStaged(Staging::kRead, std::move(lane));
      return gathered;
    }
    return std::unique_ptr<StagedRead>(
        new DeviceRead(*this, std::move(lane), ids.size(), block_bytes));
  }

  // A copier, its ids staged, for a landing or a read of `ids` (one round at most) that
  // keeps it until EndStaged; kResourceExhausted beyond one round or the kind's limit.
  Result<std::unique_ptr<Lane>> TakeStaged(Staging kind, std::span<const uint32_t> ids,
                                           size_t block_bytes) {
    if (ids.empty()) return InvalidArgumentError("no blocks to stage");
    if (ids.size() > BatchLimit(block_bytes)) {
      return ResourceExhaustedError(
          std::to_string(ids.size()) + " blocks of " + std::to_string(block_bytes) +
          " bytes exceed a copier's staging of " + std::to_string(copier_staging_bytes_));
    }
    const auto k = static_cast<size_t>(kind);
    {
      MutexLock lock(mu_);
      if (staged_[k] >= max_staged_[k]) {
        return ResourceExhaustedError(std::to_string(staged_[k]) +
                                      (kind == Staging::kLanding ? " landings" : " reads") +
                                      " staged already");
      }
      ++staged_[k];
    }
    Result<std::unique_ptr<Lane>> lane = TakeCopier();
    const Status staged = lane.ok() ? (*lane)->Stage(ids, block_bytes) : lane.status();
    if (!staged.ok()) {
      EndStaged(kind, lane.ok() ? std::move(*lane) : nullptr);
      return staged;
    }
    return lane;
  }
  // The copier back (where there is one), and one fewer of `kind` staged.
  void EndStaged(Staging kind, std::unique_ptr<Lane> lane) {
    MutexLock lock(mu_);
    if (lane) idle_.push_back(std::move(lane));
    --staged_[static_cast<size_t>(kind)];
  }
  // The first `count` blocks the lane staged, by one Scatter (its ids are on the device).
  Status ScatterStaged(const Lane& lane, size_t count, size_t block_bytes) const {
    if (count == 0) return Status::Ok();
    gpu::BlockCopyArgs args = Args(lane, {}, block_bytes);
    args.count = static_cast<uint32_t>(count);
    return lane.backend->Scatter(args);
  }
  void GiveBack(std::unique_ptr<Lane> lane) {
    MutexLock lock(mu_);
    idle_.push_back(std::move(lane));
  }

  // `each(lane, round, first)` for rounds of ids (ids[first, first + round.size())) that
  // fit a copier's staging, on a copier taken for the call, the round staged.
  template <typename Each>
  Status InRounds(std::span<const uint32_t> ids, size_t block_bytes, Each each) {
    if (ids.empty()) return Status::Ok();
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Lane> lane, TakeCopier());
    const size_t per_round = BatchLimit(block_bytes);
    Status done = Status::Ok();
    for (size_t first = 0; first < ids.size() && done.ok(); first += per_round) {
      const std::span<const uint32_t> round =
          ids.subspan(first, std::min(per_round, ids.size() - first));
      done = lane->Stage(round, block_bytes);
      if (done.ok()) done = each(*lane, round, first);
    }
    GiveBack(std::move(lane));
    return done;
  }

  Result<std::unique_ptr<Lane>> TakeCopier() {
    {
      MutexLock lock(mu_);
      if (!idle_.empty()) {
        std::unique_ptr<Lane> lane = std::move(idle_.back());
        idle_.pop_back();
        return lane;
      }
    }
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<gpu::KernelBackend> backend, make_backend_());
    return std::make_unique<Lane>(Lane{.backend = std::move(backend)});
  }

  friend class DeviceLanding;  // scatters through ScatterStaged
  friend class KeptCopier;     // gives its copier back by EndStaged

  const KernelBackendFactory make_backend_;
  const size_t copier_staging_bytes_;
  Lane lane_;  // the owner's thread's; made before `memory_` (a CPU pool's is its memory)
  Memory memory_;
  Mutex mu_;  // a leaf: nothing else is locked while it is held
  std::vector<std::unique_ptr<Lane>> idle_ KVTIER_GUARDED_BY(mu_);  // copiers between calls
  // By Staging: the most kept at once (landings, reads), and how many are kept now.
  const std::array<uint32_t, 2> max_staged_;
  std::array<uint32_t, 2> staged_ KVTIER_GUARDED_BY(mu_) = {};
};

KeptCopier::~KeptCopier() { pool_.EndStaged(kind_, std::move(lane_)); }

Status DeviceLanding::Commit(size_t count) {
  if (count > views_.size()) {
    return InvalidArgumentError("landing " + std::to_string(count) + " blocks of " +
                                std::to_string(views_.size()) + " staged");
  }
  return pool_.ScatterStaged(copier_.lane(), count, block_bytes_);
}

}  // namespace

Result<std::unique_ptr<PoolStorage>> MakeDevicePoolStorage(int device, size_t bytes) {
  BackendPoolOptions options{.make_backend = [device] { return gpu::MakeCudaBackend(device); },
                             .bytes = bytes};
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<gpu::KernelBackend> backend, options.make_backend());
  KVTIER_ASSIGN_OR_RETURN(gpu::SharedDeviceMemory memory,
                          gpu::SharedDeviceMemory::Create(device, bytes));
  return std::unique_ptr<PoolStorage>(
      new DevicePoolStorage(std::move(options), std::move(backend), std::move(memory)));
}

Result<std::unique_ptr<PoolStorage>> MakeBackendPoolStorage(BackendPoolOptions options) {
  if (!options.make_backend) return InvalidArgumentError("a backend pool needs a backend factory");
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<gpu::KernelBackend> backend, options.make_backend());
  KVTIER_ASSIGN_OR_RETURN(
      gpu::DeviceBuffer memory,
      gpu::DeviceBuffer::Create(*backend, gpu::MemoryKind::kDevice, options.bytes));
  // Zero-filled, as every pool starts.
  std::vector<uint8_t> zeros(std::min<size_t>(options.bytes, 1u << 20));
  for (size_t offset = 0; offset < options.bytes; offset += zeros.size()) {
    KVTIER_RETURN_IF_ERROR(backend->Copy(memory.as<uint8_t>() + offset, zeros.data(),
                                         std::min(zeros.size(), options.bytes - offset)));
  }
  return std::unique_ptr<PoolStorage>(
      new DevicePoolStorage(std::move(options), std::move(backend), std::move(memory)));
}

}  // namespace kvtier::worker
