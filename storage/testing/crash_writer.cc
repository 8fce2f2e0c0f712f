// A disk-tier writer to be killed: opens DiskTier at argv[1] and writes blocks
// argv[2], argv[2]+1, ... (testing::MakeBlock payloads of argv[3] bytes, in batches of
// argv[4]) until it is killed, printing "ack <id>" for every block only after PutBatch
// acknowledged it. The crash test kills it with SIGKILL and checks every acknowledged
// block afterwards.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "storage/disk_tier.h"
#include "storage/testing/blocks.h"

int main(int argc, char** argv) {
  using namespace kvtier::storage;
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s DIR FIRST_ID BLOCK_BYTES BATCH\n", argv[0]);
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
  const uint64_t batch_size = std::strtoull(argv[4], nullptr, 10);
  std::printf("ready\n");
  std::fflush(stdout);
  for (uint64_t id = std::strtoull(argv[2], nullptr, 10);; id += batch_size) {
    std::vector<testing::TestBlock> blocks;
    std::vector<PutItem> items;
    for (uint64_t i = 0; i < batch_size; ++i) blocks.push_back(testing::MakeBlock(id + i, block_bytes));
    for (const auto& block : blocks) items.push_back({block.header, block.payload});
    const std::vector<kvtier::Status> results = (*tier)->PutBatch(items);
    for (uint64_t i = 0; i < batch_size; ++i) {
      if (!results[i].ok()) {
        std::fprintf(stderr, "put %llu: %s\n", static_cast<unsigned long long>(id + i), results[i].ToString().c_str());
        return 1;
      }
      std::printf("ack %llu\n", static_cast<unsigned long long>(id + i));
    }
    std::fflush(stdout);
  }
}
