// A device pool's block copies for peers: on the worker's loop as before (ReadBlocks: one
// gather into the loop's staging, then a copy into the caller's buffers; WritableBlocks,
// a copy in, then CommitWrites: one scatter) against the copiers any thread takes
// (CopyHeld, LandHeld), from 1 to 8 threads at once; a fetch's landing through a
// copier's staging against one through a buffer; and a peer's get of held blocks sent
// from a copier's staging against one copied out first. On GPU 0 where there is one, else
// the same code on the CPU kernels (the label says which): only a GPU's figures speak of
// the copy engine.
#include <benchmark/benchmark.h>

#include <map>
#include <numeric>
#include <tuple>

#include "common/mutex.h"
#include "gpu/device.h"
#include "services/worker/pool_storage.h"

namespace kvtier::worker {
namespace {

constexpr size_t kPoolBlocks = 128;  // 8 threads x 16 blocks

// One pool per block size, made on first use and shared by the threads of a benchmark.
PoolStorage& Pool(size_t block_bytes) {
  static Mutex mu;
  static std::map<size_t, std::unique_ptr<PoolStorage>> pools;
  MutexLock lock(mu);
  std::unique_ptr<PoolStorage>& pool = pools[block_bytes];
  if (!pool) {
    const size_t bytes = kPoolBlocks * block_bytes;
    pool = gpu::ProbeDevices().has_gpu()
               ? MakeDevicePoolStorage(0, bytes).value()
               : MakeBackendPoolStorage({.make_backend =
                                             [] {
                                               return Result<std::unique_ptr<gpu::KernelBackend>>(
                                                   gpu::MakeCpuBackend());
                                             },
                                         .bytes = bytes})
                     .value();
  }
  return *pool;
}

// Whether the batch failed (the run then stops, naming why).
bool Failed(benchmark::State& state, const Status& done) {
  if (!done.ok()) state.SkipWithError(done.ToString().c_str());
  return !done.ok();
}
// Bytes moved per iteration, and where: on a GPU or the CPU kernels, by which path.
void Report(benchmark::State& state, size_t batch_bytes, const char* path) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * batch_bytes));
  state.SetLabel(std::string(gpu::ProbeDevices().has_gpu() ? "GPU 0" : "CPU kernels (no GPU)") +
                 path);
}

// A benchmark thread's batch, from its arguments (block bytes, blocks per batch, which
// way): its ids (the thread's own range of the pool) and buffers of one block each.
struct Batch {
  explicit Batch(const benchmark::State& state)
      : block_bytes(static_cast<size_t>(state.range(0))),
        blocks(static_cast<size_t>(state.range(1))),
        way(state.range(2) != 0),
        ids(blocks),
        memory(blocks * block_bytes, 1) {
    std::iota(ids.begin(), ids.end(),
              static_cast<uint32_t>(state.thread_index() * blocks % kPoolBlocks));
    for (size_t i = 0; i < blocks; ++i) {
      buffers.emplace_back(memory.data() + i * block_bytes, block_bytes);
      inputs.emplace_back(memory.data() + i * block_bytes, block_bytes);
    }
  }
  const size_t block_bytes;
  const size_t blocks;
  const bool way;  // the third argument: land (1) or read; staged (1) or buffered
  std::vector<uint32_t> ids;
  std::vector<uint8_t> memory;
  std::vector<std::span<uint8_t>> buffers;
  std::vector<std::span<const uint8_t>> inputs;
};

// Batches of 16 blocks of 256 KiB and of 2 MiB, each of two ways (`way`: 0 or 1).
benchmark::internal::Benchmark* Batches(benchmark::internal::Benchmark* b, const char* way) {
  return b->ArgNames({"block_bytes", "blocks", way})
      ->ArgsProduct({{256 << 10, 2 << 20}, {16}, {0, 1}})
      ->UseRealTime();
}

// Args: block bytes, blocks per batch, 0 = read (out of the pool) or 1 = land (into it).
void BM_OnTheLoop(benchmark::State& state) {
  Batch batch(state);
  const auto [block_bytes, blocks, land] = std::tuple(batch.block_bytes, batch.blocks, batch.way);
  PoolStorage& pool = Pool(block_bytes);
  std::vector<std::span<const uint8_t>> read;
  std::vector<std::span<uint8_t>> writable;
  for (auto _ : state) {
    Status done;
    if (land) {
      done = pool.WritableBlocks(batch.ids, block_bytes, &writable);
      for (size_t i = 0; done.ok() && i < blocks; ++i) {
        std::copy_n(batch.memory.data() + i * block_bytes, block_bytes, writable[i].data());
      }
      if (done.ok()) done = pool.CommitWrites(batch.ids, block_bytes);
    } else {
      done = pool.ReadBlocks(batch.ids, block_bytes, &read);
      for (size_t i = 0; done.ok() && i < blocks; ++i) {
        std::copy_n(read[i].data(), block_bytes, batch.buffers[i].data());
      }
    }
    if (Failed(state, done)) break;
  }
  Report(state, blocks * block_bytes, land ? ", landed on the loop" : ", read on the loop");
}
BENCHMARK(BM_OnTheLoop)->Apply([](benchmark::internal::Benchmark* b) { Batches(b, "land"); });

// The same batches by CopyHeld or LandHeld, each thread on its own blocks and copier.
void BM_OnCopiers(benchmark::State& state) {
  Batch batch(state);
  const auto [block_bytes, blocks, land] = std::tuple(batch.block_bytes, batch.blocks, batch.way);
  PoolStorage& pool = Pool(block_bytes);
  for (auto _ : state) {
    const Status done = land ? pool.LandHeld(batch.ids, block_bytes, batch.inputs)
                             : pool.CopyHeld(batch.ids, block_bytes, batch.buffers);
    if (Failed(state, done)) break;
  }
  Report(state, blocks * block_bytes, land ? ", landed by copiers" : ", copied out by copiers");
}
BENCHMARK(BM_OnCopiers)->Apply([](benchmark::internal::Benchmark* b) {
  Batches(b, "land")->ThreadRange(1, 8);
});

// A fetch's run landing in held blocks, counted from its payloads' arrival (a copy from
// the "socket", `wire`): into a staged landing's pinned staging, then its Commit (one
// scatter); or, staged 0, into a buffer of the fetch, then LandHeld (a copy into a
// copier's staging, then one scatter).
void BM_FetchLanding(benchmark::State& state) {
  Batch batch(state);
  const auto [block_bytes, blocks, staged] = std::tuple(batch.block_bytes, batch.blocks, batch.way);
  PoolStorage& pool = Pool(block_bytes);
  const std::vector<uint8_t> wire(blocks * block_bytes, 7);
  for (auto _ : state) {
    Status done;
    if (staged) {
      Result<std::unique_ptr<StagedLanding>> landing = pool.StageLanding(batch.ids, block_bytes);
      done = landing.status();
      for (size_t i = 0; done.ok() && i < blocks; ++i) {
        std::copy_n(wire.data() + i * block_bytes, block_bytes, (*landing)->views()[i].data());
      }
      if (done.ok()) done = (*landing)->Commit(blocks);
    } else {
      std::copy_n(wire.data(), wire.size(), batch.memory.data());
      done = pool.LandHeld(batch.ids, block_bytes, batch.inputs);
    }
    if (Failed(state, done)) break;
  }
  Report(state, blocks * block_bytes,
         staged ? ", fetched into staging" : ", fetched into a buffer");
}
BENCHMARK(BM_FetchLanding)->Apply([](benchmark::internal::Benchmark* b) { Batches(b, "staged"); });

// A peer's keyed get of held blocks, counted to their bytes' send (a copy into the
// "socket", `wire`, as a write into it is): copied out by CopyHeld into the stream's
// buffer, then sent from there; or, staged 1, gathered by StageHeld into a copier's
// staging and sent from there, one host copy fewer. A staged read refused (as many staged
// as the pool allows) is copied, as the stream does; the counter says how often.
void BM_ServeHeld(benchmark::State& state) {
  Batch batch(state);
  const auto [block_bytes, blocks, staged] = std::tuple(batch.block_bytes, batch.blocks, batch.way);
  PoolStorage& pool = Pool(block_bytes);
  std::vector<uint8_t> wire(blocks * block_bytes);
  int64_t copied_instead = 0;
  for (auto _ : state) {
    std::unique_ptr<StagedRead> read;
    if (staged) {
      Result<std::unique_ptr<StagedRead>> taken = pool.StageHeld(batch.ids, block_bytes);
      if (taken.ok()) {
        read = std::move(*taken);
      } else if (taken.status().code() != StatusCode::kResourceExhausted) {
        Failed(state, taken.status());
        break;
      }
    }
    Status done;
    if (read) {
      for (size_t i = 0; i < blocks; ++i)
        std::copy_n(read->views()[i].data(), block_bytes, &wire[i * block_bytes]);
    } else {
      copied_instead += staged ? 1 : 0;
      done = pool.CopyHeld(batch.ids, block_bytes, batch.buffers);
      if (done.ok()) std::copy_n(batch.memory.data(), wire.size(), wire.data());
    }
    if (Failed(state, done)) break;
  }
  state.counters["copied_instead"] = static_cast<double>(copied_instead);
  Report(state, blocks * block_bytes,
         staged ? ", sent from a copier's staging" : ", copied out, then sent");
}
BENCHMARK(BM_ServeHeld)->Apply([](benchmark::internal::Benchmark* b) {
  Batches(b, "staged")->ThreadRange(1, 4);
});

}  // namespace
}  // namespace kvtier::worker
