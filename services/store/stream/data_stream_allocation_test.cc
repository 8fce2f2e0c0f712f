// The data stream's hot path allocates nothing per block: once warm, a keyed get or a
// keyed put of 64 blocks makes no more heap allocations, counted process-wide (the
// client's thread and the node's loops and tier threads), than one of 8.
//
// This binary replaces the global operator new to count; the other stream tests do not.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <new>
#include <vector>

#include "services/store/stream/data_stream_client.h"
#include "services/store/stream/data_stream_server.h"
#include "services/store/stream/testing/data_stream_fixture.h"
#include "storage/testing/blocks.h"
#include "storage/testing/tiered_stores.h"

namespace {

std::atomic<uint64_t> g_allocations{0};

void* Allocate(std::size_t bytes, std::size_t alignment) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  bytes = std::max<std::size_t>(bytes, 1);
  if (alignment <= alignof(std::max_align_t)) return std::malloc(bytes);
  return std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
}

void* AllocateOrThrow(std::size_t bytes, std::size_t alignment) {
  if (void* p = Allocate(bytes, alignment)) return p;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(std::size_t n) { return AllocateOrThrow(n, 0); }
void* operator new[](std::size_t n) { return AllocateOrThrow(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return AllocateOrThrow(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return AllocateOrThrow(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return Allocate(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return Allocate(n, 0); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace kvtier::store {
namespace {

using storage::testing::MakeBlock;
using storage::testing::TestBlock;
using storage::testing::kScope;
constexpr size_t kBlockBytes = 64 * 1024;
constexpr size_t kFew = 8, kMany = 64;
constexpr int kRounds = 5;
// Allocations a transfer of kMany blocks may make beyond one of kFew.
constexpr uint64_t kSlack = 0;

// The fewest allocations any of kRounds calls of `transfer(round)` made: a background
// allocation of the node's (a timer, a metric) lands in some rounds, not in all.
template <typename Fn>
uint64_t FewestAllocations(Fn&& transfer) {
  uint64_t fewest = std::numeric_limits<uint64_t>::max();
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t before = g_allocations.load();
    transfer(round);
    fewest = std::min(fewest, g_allocations.load() - before);
  }
  return fewest;
}

// A node's host tier of 32 MiB behind a data stream on loopback.
class StreamAllocationTest : public DataStreamFixture {
 protected:
  void SetUp() override { StartNode(storage::testing::HostOnly(32u << 20)); }
};

// Blocks 0-63 stored; keyed gets of 8 and of 64 of them, each into buffers made before.
TEST_F(StreamAllocationTest, AKeyedGetAllocatesNothingPerBlock) {
  std::vector<BlockKey> keys;
  for (uint64_t id = 0; id < kMany; ++id) {
    const TestBlock block = MakeBlock(id, kBlockBytes);
    ASSERT_TRUE(store_->Put(block.header, block.payload).ok());
    keys.push_back(block.header.key);
  }
  const TransferTicket session =
      server_->OpenSession({.format_tag = storage::testing::kFormat, .salt_scope = kScope}).value();
  auto client = Client();
  std::vector<std::vector<uint8_t>> buffers(kMany, std::vector<uint8_t>(kBlockBytes));
  const DataStreamClient::BufferFor into_buffers = [&](size_t i, const storage::BlockHeader&) {
    return std::span<uint8_t>(buffers[i]);
  };
  const auto get = [&](size_t blocks) {
    const auto got = client->GetKeys(session, std::span(keys).first(blocks), into_buffers);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(std::count(got->states.begin(), got->states.end(), StreamBlockState::kPresent),
              static_cast<std::ptrdiff_t>(blocks));
  };
  get(kMany);  // warm: the node's staging and the connection's buffers
  get(kMany);
  const uint64_t few = FewestAllocations([&](int) { get(kFew); });
  const uint64_t many = FewestAllocations([&](int) { get(kMany); });
  EXPECT_LE(many, few + kSlack) << "a get of " << kFew << " blocks made " << few << " allocations, of " << kMany
                                << " blocks " << many;
}

// Keyed puts of 8 and of 64 new blocks each (their headers and bytes made before), into a
// host tier that drops its coldest blocks to take them.
TEST_F(StreamAllocationTest, AKeyedPutAllocatesNothingPerBlock) {
  const TransferTicket session =
      server_->OpenSession({.op = StreamOp::kPutHeaders, .salt_scope = kScope, .max_blocks = kMaxStreamKeys})
          .value();
  auto client = Client();
  // Every put's blocks, made up front: (2 warm-up + kRounds) puts of kMany, kRounds of kFew.
  std::vector<TestBlock> blocks;
  for (uint64_t id = 0; id < (2 + 2 * kRounds) * kMany; ++id) blocks.push_back(MakeBlock(1000 + id, kBlockBytes));
  std::vector<storage::BlockHeader> headers;
  std::vector<std::span<const uint8_t>> payloads;
  for (const TestBlock& b : blocks) {
    headers.push_back(b.header);
    payloads.emplace_back(b.payload);
  }
  size_t next = 0;
  const auto put = [&](size_t count) {
    const auto stored = client->PutBlocks(session, std::span(headers).subspan(next, count),
                                          std::span(payloads).subspan(next, count));
    next += kMany;
    ASSERT_TRUE(stored.ok()) << stored.status();
    ASSERT_EQ(*stored, count);
  };
  put(kMany);  // warm
  put(kMany);
  const uint64_t few = FewestAllocations([&](int) { put(kFew); });
  const uint64_t many = FewestAllocations([&](int) { put(kMany); });
  EXPECT_LE(many, few + kSlack) << "a put of " << kFew << " blocks made " << few << " allocations, of " << kMany
                                << " blocks " << many;
}

}  // namespace
}  // namespace kvtier::store
