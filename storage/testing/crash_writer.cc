// A disk-tier writer to be killed: opens DiskTier at DIR and writes blocks FIRST_ID,
// FIRST_ID+1, ... (testing::MakeBlock payloads of BLOCK_BYTES, in batches of BATCH) until
// it is killed, printing "ack <id>" for every block only after PutBatch acknowledged it.
// With "churn", after each batch it removes the blocks of the previous batch whose id is
// not a multiple of 4, printing "removing <id>" before and "removed <id>" once each
// removal is acknowledged: three quarters of every segment die, so the puts keep
// compacting under the kill. With "threads=N", N threads put at once (thread t the
// batches FIRST_ID + (k*N + t)*BATCH), so that their batches are written in groups
// (storage/put_group_queue.h) when the kill comes; their "ack" lines interleave. The
// crash test kills it with SIGKILL and checks the tier afterwards.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "storage/disk_tier.h"
#include "storage/testing/blocks.h"

namespace {

using namespace kvtier::storage;

bool PutBatch(DiskTier& tier, uint64_t first, uint64_t count, uint64_t block_bytes) {
  std::vector<testing::TestBlock> blocks;
  std::vector<PutItem> items;
  for (uint64_t i = 0; i < count; ++i) blocks.push_back(testing::MakeBlock(first + i, block_bytes));
  for (const auto& block : blocks) items.push_back({block.header, block.payload});
  const std::vector<kvtier::Status> results = tier.PutBatch(items);
  for (uint64_t i = 0; i < count; ++i) {
    if (!results[i].ok()) {
      std::fprintf(stderr, "put %llu: %s\n", static_cast<unsigned long long>(first + i),
                   results[i].ToString().c_str());
      return false;
    }
    std::printf("ack %llu\n", static_cast<unsigned long long>(first + i));
  }
  return true;
}

bool RemoveMostOf(DiskTier& tier, uint64_t first, uint64_t count) {
  for (uint64_t id = first; id < first + count; ++id) {
    if (id % 4 == 0) continue;
    // Said (and flushed) before: once Remove starts, the block may be gone whether or not
    // the kill lets "removed" out.
    std::printf("removing %llu\n", static_cast<unsigned long long>(id));
    std::fflush(stdout);
    if (kvtier::Status removed = tier.Remove(testing::MakeBlock(id, 1).ref()); !removed.ok()) {
      std::fprintf(stderr, "remove %llu: %s\n", static_cast<unsigned long long>(id),
                   removed.ToString().c_str());
      return false;
    }
    std::printf("removed %llu\n", static_cast<unsigned long long>(id));
  }
  return true;
}

// Puts every `stride`-th batch from `first` on until a put fails (or the kill).
void PutForever(DiskTier& tier, uint64_t first, uint64_t stride, uint64_t batch,
                uint64_t block_bytes) {
  for (uint64_t id = first;; id += stride) {
    if (!PutBatch(tier, id, batch, block_bytes)) std::_Exit(1);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 6 ? argv[5] : "";
  const bool churn = mode == "churn";
  const uint64_t threads =
      mode.starts_with("threads=") ? std::strtoull(mode.c_str() + 8, nullptr, 10) : 1;
  if ((argc != 5 && argc != 6) || (argc == 6 && !churn && threads == 1) || threads == 0 ||
      threads > 64) {
    std::fprintf(stderr, "usage: %s DIR FIRST_ID BLOCK_BYTES BATCH [churn | threads=N (2 to 64)]\n",
                 argv[0]);
    return 2;
  }
  DiskTierOptions options;
  options.path = argv[1];
  options.capacity_bytes = 1ull << 40;
  options.memtable_bytes = 4 << 20;  // small, so that header flushes happen under the kill too
  options.segment_bytes = 1 << 20;   // and segments fill and are sealed
  auto tier = DiskTier::Create(options);
  if (!tier.ok()) {
    std::fprintf(stderr, "open: %s\n", tier.status().ToString().c_str());
    return 1;
  }
  const uint64_t block_bytes = std::strtoull(argv[3], nullptr, 10);
  const uint64_t batch = std::strtoull(argv[4], nullptr, 10);
  std::printf("ready\n");
  std::fflush(stdout);
  const uint64_t first = std::strtoull(argv[2], nullptr, 10);
  if (threads > 1) {
    std::vector<std::thread> putters;
    for (uint64_t t = 0; t < threads; ++t) {
      putters.emplace_back(PutForever, std::ref(**tier), first + t * batch, threads * batch, batch,
                           block_bytes);
    }
    for (std::thread& putter : putters) putter.join();  // never: they put until killed
    return 1;
  }
  for (uint64_t id = first;; id += batch) {
    if (!PutBatch(**tier, id, batch, block_bytes)) return 1;
    if (churn && id > first && !RemoveMostOf(**tier, id - batch, batch)) return 1;
    std::fflush(stdout);
  }
}
