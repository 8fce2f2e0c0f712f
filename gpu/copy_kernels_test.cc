// Linear and paged KV updates, gather and scatter, on every backend this machine has,
// each checked against a naive element-by-element loop.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>

#include "gpu/testing/backends.h"

namespace kvtier::gpu {
namespace {

using testing::Download;
using testing::RandomBytes;
using testing::RandomFloats;
using testing::TestBackends;
using testing::Upload;

// The example of TensorRT's KVCacheUpdate documentation: cache [4, 2, 8, 1], update
// [4, 2, 4, 1], write indices {2, 1, 1, 3}; each row keeps its old prefix.
TEST(LinearUpdateTest, TensorRtDocumentationExample) {
  const std::vector<std::vector<float>> cache_rows = {
      {0.53f, 0.88f}, {0.41f}, {0.67f}, {0.32f, 0.79f, 0.64f}};
  const std::vector<std::vector<float>> update_rows = {
      {0.72f, 0, 0, 0}, {0.55f, 0.94f, 0, 0}, {0.61f, 0.28f, 0, 0}, {0.83f, 0, 0, 0}};
  const std::vector<std::vector<float>> expected_rows = {{0.53f, 0.88f, 0.72f, 0, 0, 0},
                                                         {0.41f, 0.55f, 0.94f, 0, 0},
                                                         {0.67f, 0.61f, 0.28f, 0, 0},
                                                         {0.32f, 0.79f, 0.64f, 0.83f, 0, 0, 0}};
  std::vector<float> cache(4 * 2 * 8, 0.0f), update(4 * 2 * 4, 0.0f), expected(4 * 2 * 8, 0.0f);
  for (int b = 0; b < 4; ++b) {
    for (int h = 0; h < 2; ++h) {
      for (size_t s = 0; s < cache_rows[b].size(); ++s)
        cache[(b * 2 + h) * 8 + s] = cache_rows[b][s];
      for (size_t s = 0; s < 4; ++s) update[(b * 2 + h) * 4 + s] = update_rows[b][s];
      for (size_t s = 0; s < expected_rows[b].size(); ++s)
        expected[(b * 2 + h) * 8 + s] = expected_rows[b][s];
    }
  }
  // The documented example writes all four update positions; positions past the row's
  // data in `expected` are the update's zeros, as in the documentation's output.
  const std::vector<int32_t> indices = {2, 1, 1, 3};
  for (auto& backend : TestBackends()) {
    DeviceBuffer cache_buf = Upload(*backend, cache), update_buf = Upload(*backend, update),
                 idx = Upload(*backend, indices);
    LinearUpdateArgs args{cache_buf.data(),
                          update_buf.data(),
                          idx.data(),
                          IndexType::kInt32,
                          KvDtype::kFp32,
                          4,
                          2,
                          8,
                          4,
                          1};
    ASSERT_TRUE(backend->UpdateLinear(args).ok()) << backend->name();
    EXPECT_EQ(Download<float>(*backend, cache_buf, cache.size()), expected) << backend->name();
  }
}

struct LinearCase {
  KvDtype dtype;
  IndexType index_type;
};

class LinearUpdateMatrix : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearUpdateMatrix, MatchesNaiveLoop) {
  const auto [dtype, index_type] = GetParam();
  const uint32_t batch = 3, heads = 2, max_seq = 16, seq = 5, head = 12;
  const size_t eb = DtypeBytes(dtype);
  const std::vector<uint8_t> cache = RandomBytes(size_t{batch} * heads * max_seq * head * eb, 1);
  const std::vector<uint8_t> update = RandomBytes(size_t{batch} * heads * seq * head * eb, 2);
  const std::vector<int64_t> writes = {0, 11, 7};  // 11 + 5 == max_seq: the last fitting index
  std::vector<uint8_t> expected = cache;
  for (uint32_t i = 0; i < batch; ++i)
    for (uint32_t h = 0; h < heads; ++h)
      for (uint32_t j = 0; j < seq; ++j)
        for (uint32_t d = 0; d < head; ++d)
          for (size_t byte = 0; byte < eb; ++byte)
            expected[((((size_t{i} * heads + h) * max_seq + writes[i] + j) * head + d) * eb) +
                     byte] = update[((((size_t{i} * heads + h) * seq + j) * head + d) * eb) + byte];
  std::vector<uint8_t> index_bytes(batch * (index_type == IndexType::kInt32 ? 4 : 8));
  for (uint32_t i = 0; i < batch; ++i) {
    if (index_type == IndexType::kInt32)
      reinterpret_cast<int32_t*>(index_bytes.data())[i] = static_cast<int32_t>(writes[i]);
    else
      reinterpret_cast<int64_t*>(index_bytes.data())[i] = writes[i];
  }
  for (auto& backend : TestBackends()) {
    DeviceBuffer c = Upload(*backend, cache), u = Upload(*backend, update),
                 idx = Upload(*backend, index_bytes);
    LinearUpdateArgs args{c.data(), u.data(), idx.data(), index_type, dtype,
                          batch,    heads,    max_seq,    seq,        head};
    ASSERT_TRUE(backend->UpdateLinear(args).ok()) << backend->name();
    EXPECT_EQ(Download<uint8_t>(*backend, c, cache.size()), expected) << backend->name();
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypesAndIndexTypes, LinearUpdateMatrix,
                         ::testing::Values(LinearCase{KvDtype::kFp32, IndexType::kInt32},
                                           LinearCase{KvDtype::kFp16, IndexType::kInt64},
                                           LinearCase{KvDtype::kBf16, IndexType::kInt32},
                                           LinearCase{KvDtype::kFp32, IndexType::kInt64}));

TEST(LinearUpdateTest, AnIndexThatOverflowsWritesNothing) {
  const std::vector<float> cache(2 * 1 * 8 * 4, 7.0f), update(2 * 1 * 3 * 4, 1.0f);
  for (const std::vector<int32_t>& bad :
       {std::vector<int32_t>{0, 6}, std::vector<int32_t>{-1, 0}}) {
    for (auto& backend : TestBackends()) {
      DeviceBuffer c = Upload(*backend, cache), u = Upload(*backend, update),
                   idx = Upload(*backend, bad);
      LinearUpdateArgs args{c.data(), u.data(), idx.data(), IndexType::kInt32, KvDtype::kFp32, 2, 1,
                            8,        3,        4};
      const Status status = backend->UpdateLinear(args);
      EXPECT_EQ(status.code(), StatusCode::kOutOfRange) << backend->name();
      EXPECT_NE(
          status.message().find(bad[0] < 0 ? "write_indices[0] = -1" : "write_indices[1] = 6"),
          std::string::npos)
          << status.message();
      // Element 0 of {0, 6} was valid, yet nothing was written for it either.
      EXPECT_EQ(Download<float>(*backend, c, cache.size()), cache) << backend->name();
    }
  }
}

TEST(LinearUpdateTest, RejectsBadShapesAndDtypes) {
  auto backend = MakeCpuBackend();
  float cache[4], update[4];
  int32_t idx[1] = {0};
  LinearUpdateArgs args{cache, update, idx, IndexType::kInt32, KvDtype::kInt8, 1, 1, 4, 1, 1};
  EXPECT_EQ(backend->UpdateLinear(args).code(),
            StatusCode::kInvalidArgument);  // int8 is not a cache dtype
  args.dtype = KvDtype::kFp32;
  args.seq = 5;  // longer than max_seq
  EXPECT_EQ(backend->UpdateLinear(args).code(), StatusCode::kInvalidArgument);
  args.seq = 1;
  args.update = nullptr;
  EXPECT_EQ(backend->UpdateLinear(args).code(), StatusCode::kInvalidArgument);
}

KvLayout SmallLayout(KvDtype dtype) {
  return KvLayout::Create({.num_layers = 3,
                           .num_kv_heads = 2,
                           .head_dim = 8,
                           .tokens_per_block = 4,
                           .dtype = dtype})
      .value();
}

TEST(PagedUpdateTest, WritesThroughTheSlotMappingAndSkipsPadding) {
  for (KvDtype dtype : {KvDtype::kFp32, KvDtype::kFp16, KvDtype::kBf16}) {
    const KvLayout layout = SmallLayout(dtype);
    const size_t pool_blocks = 5, eb = DtypeBytes(layout.dtype());
    const std::vector<uint8_t> pool = RandomBytes(pool_blocks * layout.bytes_per_block(), 3);
    const uint32_t tokens = 6;
    const std::vector<uint8_t> update = RandomBytes(size_t{tokens} * 2 * 8 * eb, 4);
    // Tokens land in blocks 3, 3, 0, 4 (last slot of the pool), padding, block 1.
    const std::vector<int64_t> slots = {12, 13, 2, 19, -1, 5};
    std::vector<uint8_t> expected = pool;
    for (uint32_t t = 0; t < tokens; ++t) {
      if (slots[t] < 0) continue;
      for (uint32_t h = 0; h < 2; ++h)
        for (uint32_t d = 0; d < 8; ++d)
          for (size_t byte = 0; byte < eb; ++byte)
            expected[slots[t] / 4 * layout.bytes_per_block() +
                     layout.ByteOffset(1, KvPart::kValue, h, static_cast<uint32_t>(slots[t] % 4)) +
                     d * eb + byte] = update[((size_t{t} * 2 + h) * 8 + d) * eb + byte];
    }
    for (auto& backend : TestBackends()) {
      DeviceBuffer p = Upload(*backend, pool), u = Upload(*backend, update),
                   s = Upload(*backend, slots);
      PagedUpdateArgs args{p.data(),       pool_blocks, &layout,         1,
                           KvPart::kValue, u.data(),    s.as<int64_t>(), tokens};
      ASSERT_TRUE(backend->UpdatePaged(args).ok()) << backend->name();
      EXPECT_EQ(Download<uint8_t>(*backend, p, pool.size()), expected)
          << backend->name() << " " << DtypeName(dtype);
    }
  }
}

TEST(PagedUpdateTest, ASlotOutsideThePoolWritesNothing) {
  const KvLayout layout = SmallLayout(KvDtype::kFp16);
  const std::vector<uint8_t> pool = RandomBytes(2 * layout.bytes_per_block(), 5);
  const std::vector<uint8_t> update = RandomBytes(2 * 2 * 8 * 2, 6);
  const std::vector<int64_t> slots = {0, 8};  // 2 blocks of 4 tokens: slot 8 does not exist
  for (auto& backend : TestBackends()) {
    DeviceBuffer p = Upload(*backend, pool), u = Upload(*backend, update),
                 s = Upload(*backend, slots);
    PagedUpdateArgs args{p.data(), 2, &layout, 0, KvPart::kKey, u.data(), s.as<int64_t>(), 2};
    const Status status = backend->UpdatePaged(args);
    EXPECT_EQ(status.code(), StatusCode::kOutOfRange) << backend->name();
    EXPECT_NE(status.message().find("slot_mapping[1] = 8"), std::string::npos) << status.message();
    EXPECT_EQ(Download<uint8_t>(*backend, p, pool.size()), pool) << backend->name();
    args.layer = 3;  // the layout has layers 0..2
    EXPECT_EQ(backend->UpdatePaged(args).code(), StatusCode::kOutOfRange) << backend->name();
  }
}

TEST(BlockCopyTest, GatherThenScatterMovesWholeBlocks) {
  const size_t block_bytes = 4096 + 48, pool_blocks = 9;
  const std::vector<uint8_t> pool = RandomBytes(pool_blocks * block_bytes, 7);
  const std::vector<uint32_t> ids = {8, 0, 3, 5};
  for (auto& backend : TestBackends()) {
    DeviceBuffer p = Upload(*backend, pool), i = Upload(*backend, ids);
    auto staging = DeviceBuffer::Create(*backend, MemoryKind::kStaging, ids.size() * block_bytes);
    ASSERT_TRUE(staging.ok());
    BlockCopyArgs args{p.data(), pool_blocks, block_bytes, i.as<uint32_t>(), 4, staging->data()};
    ASSERT_TRUE(backend->Gather(args).ok()) << backend->name();
    const auto* staged = staging->as<uint8_t>();  // staging is host memory on every backend
    for (size_t k = 0; k < ids.size(); ++k) {
      ASSERT_EQ(
          std::memcmp(staged + k * block_bytes, pool.data() + ids[k] * block_bytes, block_bytes), 0)
          << k;
    }
    // Scatter the staged blocks back rotated by one: block 8's bytes into block 0, etc.
    const std::vector<uint32_t> rotated = {0, 3, 5, 8};
    DeviceBuffer r = Upload(*backend, rotated);
    args.block_ids = r.as<uint32_t>();
    ASSERT_TRUE(backend->Scatter(args).ok()) << backend->name();
    std::vector<uint8_t> expected = pool;
    for (size_t k = 0; k < ids.size(); ++k) {
      std::memcpy(expected.data() + rotated[k] * block_bytes, pool.data() + ids[k] * block_bytes,
                  block_bytes);
    }
    EXPECT_EQ(Download<uint8_t>(*backend, p, pool.size()), expected) << backend->name();
  }
}

TEST(BlockCopyTest, BadOrRepeatedBlockIdsCopyNothing) {
  const size_t block_bytes = 64, pool_blocks = 4;
  const std::vector<uint8_t> pool = RandomBytes(pool_blocks * block_bytes, 8);
  for (auto& backend : TestBackends()) {
    DeviceBuffer p = Upload(*backend, pool);
    auto staging = DeviceBuffer::Create(*backend, MemoryKind::kStaging, 2 * block_bytes).value();
    std::memset(staging.data(), 0xAB, 2 * block_bytes);
    DeviceBuffer bad = Upload(*backend, std::vector<uint32_t>{1, 4});
    BlockCopyArgs args{p.data(), pool_blocks, block_bytes, bad.as<uint32_t>(), 2, staging.data()};
    Status status = backend->Scatter(args);
    EXPECT_EQ(status.code(), StatusCode::kOutOfRange) << backend->name();
    EXPECT_NE(status.message().find("block_ids[1] = 4"), std::string::npos) << status.message();
    DeviceBuffer repeated = Upload(*backend, std::vector<uint32_t>{2, 2});
    args.block_ids = repeated.as<uint32_t>();
    status = backend->Scatter(args);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << backend->name();
    EXPECT_NE(status.message().find("repeats"), std::string::npos) << status.message();
    EXPECT_EQ(Download<uint8_t>(*backend, p, pool.size()), pool) << backend->name();
    EXPECT_TRUE(backend->Gather(args).ok()) << "reading a block twice is fine";
    args.block_bytes = 60;
    EXPECT_EQ(backend->Gather(args).code(), StatusCode::kInvalidArgument) << "not a multiple of 16";
  }
}

// The CUDA backend checks a batch of up to 256 indices inside the work kernel and a
// larger one in a validation kernel before it: the same answers either side of the line,
// with the bad index last so that every index before it is read and found good.
class BatchSizes : public ::testing::TestWithParam<uint32_t> {};

TEST_P(BatchSizes, ABadOrRepeatedLastBlockIdCopiesNothing) {
  const uint32_t count = GetParam();
  const size_t block_bytes = 32, pool_blocks = count + 1;
  const std::vector<uint8_t> pool = RandomBytes(pool_blocks * block_bytes, count);
  std::vector<uint32_t> good(count);
  std::iota(good.rbegin(), good.rend(), 1u);  // blocks count..1: every block but 0
  std::vector<uint32_t> out_of_range = good, repeated = good;
  out_of_range.back() = static_cast<uint32_t>(pool_blocks);
  repeated.back() = good.front();
  for (auto& backend : TestBackends()) {
    DeviceBuffer p = Upload(*backend, pool), g = Upload(*backend, good),
                 o = Upload(*backend, out_of_range), r = Upload(*backend, repeated);
    const std::vector<uint8_t> staged_before = RandomBytes(count * block_bytes, count + 1);
    DeviceBuffer staging = Upload(*backend, staged_before, MemoryKind::kStaging);
    BlockCopyArgs args{p.data(), pool_blocks, block_bytes, o.as<uint32_t>(), count, staging.data()};
    const std::string last =
        "block_ids[" + std::to_string(count - 1) + "] = " + std::to_string(pool_blocks);
    for (bool gather : {true, false}) {
      const Status status = gather ? backend->Gather(args) : backend->Scatter(args);
      EXPECT_EQ(status.code(), StatusCode::kOutOfRange) << backend->name() << " " << count;
      EXPECT_NE(status.message().find(last), std::string::npos) << status.message();
    }
    if (count > 1) {  // a batch of one has no repeat
      args.block_ids = r.as<uint32_t>();
      EXPECT_EQ(backend->Scatter(args).code(), StatusCode::kInvalidArgument)
          << backend->name() << " " << count;
    }
    EXPECT_EQ(Download<uint8_t>(*backend, p, pool.size()), pool) << backend->name() << " " << count;
    EXPECT_EQ(std::memcmp(staging.data(), staged_before.data(), staged_before.size()), 0)
        << backend->name();

    // The next good call after the failed ones writes every block: block 0 keeps its bytes.
    args.block_ids = g.as<uint32_t>();
    ASSERT_TRUE(backend->Scatter(args).ok()) << backend->name() << " " << count;
    std::vector<uint8_t> expected = pool;
    for (uint32_t k = 0; k < count; ++k) {
      std::memcpy(expected.data() + good[k] * block_bytes, staged_before.data() + k * block_bytes,
                  block_bytes);
    }
    EXPECT_EQ(Download<uint8_t>(*backend, p, pool.size()), expected)
        << backend->name() << " " << count;
  }
}

TEST_P(BatchSizes, AnOverflowingLastWriteIndexWritesNothing) {
  const uint32_t batch = GetParam(), max_seq = 8, seq = 3, head = 4;
  const std::vector<float> cache = RandomFloats(size_t{batch} * max_seq * head, batch);
  const std::vector<float> update = RandomFloats(size_t{batch} * seq * head, batch + 1);
  std::vector<int64_t> indices(batch, 5);  // 5 + 3 = 8: every row fits exactly...
  indices.back() = 6;                      // ...but the last, which would end at 9
  for (auto& backend : TestBackends()) {
    DeviceBuffer c = Upload(*backend, cache), u = Upload(*backend, update),
                 idx = Upload(*backend, indices);
    LinearUpdateArgs args{
        c.data(), u.data(), idx.data(), IndexType::kInt64, KvDtype::kFp32, batch, 1,
        max_seq,  seq,      head};
    const Status status = backend->UpdateLinear(args);
    EXPECT_EQ(status.code(), StatusCode::kOutOfRange) << backend->name() << " " << batch;
    EXPECT_NE(status.message().find("write_indices[" + std::to_string(batch - 1) + "] = 6"),
              std::string::npos)
        << status.message();
    EXPECT_EQ(Download<float>(*backend, c, cache.size()), cache) << backend->name() << " " << batch;
  }
}

TEST_P(BatchSizes, ASlotOutsideThePoolForTheLastTokenWritesNothing) {
  const uint32_t tokens = GetParam();
  const KvLayout layout = SmallLayout(KvDtype::kFp16);  // 4 tokens per block
  const size_t pool_blocks = (tokens + 3) / 4;
  const std::vector<uint8_t> pool = RandomBytes(pool_blocks * layout.bytes_per_block(), tokens);
  const std::vector<uint8_t> update = RandomBytes(size_t{tokens} * 2 * 8 * 2, tokens + 1);
  std::vector<int64_t> slots(tokens);
  std::iota(slots.begin(), slots.end(), 0);              // token t into slot t: every slot good...
  slots.back() = static_cast<int64_t>(pool_blocks * 4);  // ...but the last, one past the pool
  for (auto& backend : TestBackends()) {
    DeviceBuffer p = Upload(*backend, pool), u = Upload(*backend, update),
                 s = Upload(*backend, slots);
    PagedUpdateArgs args{p.data(),       pool_blocks, &layout,         2,
                         KvPart::kValue, u.data(),    s.as<int64_t>(), tokens};
    const Status status = backend->UpdatePaged(args);
    EXPECT_EQ(status.code(), StatusCode::kOutOfRange) << backend->name() << " " << tokens;
    EXPECT_NE(status.message().find("slot_mapping[" + std::to_string(tokens - 1) +
                                    "] = " + std::to_string(pool_blocks * 4)),
              std::string::npos)
        << status.message();
    EXPECT_EQ(Download<uint8_t>(*backend, p, pool.size()), pool)
        << backend->name() << " " << tokens;
  }
}

INSTANTIATE_TEST_SUITE_P(EitherSideOfTheFusedCheck, BatchSizes,
                         ::testing::Values(1u, 255u, 256u, 257u, 1000u));

}  // namespace
}  // namespace kvtier::gpu

namespace kvtier::gpu {
namespace {

// 6 runs of 40 bytes at a pitch of 64 (source) and 96 (destination); the bytes between
// runs stay as they were.
TEST(Copy2DTest, CopiesEveryRunAndNothingBetween) {
  const std::vector<uint8_t> src = testing::RandomBytes(6 * 64, 21);
  const std::vector<uint8_t> dst = testing::RandomBytes(6 * 96, 22);
  std::vector<uint8_t> expected = dst;
  for (size_t row = 0; row < 6; ++row) std::memcpy(&expected[row * 96], &src[row * 64], 40);
  for (auto& backend : testing::TestBackends()) {
    DeviceBuffer s = testing::Upload(*backend, src), d = testing::Upload(*backend, dst);
    ASSERT_TRUE(backend->Copy2D(d.data(), 96, s.data(), 64, 40, 6).ok()) << backend->name();
    EXPECT_EQ(testing::Download<uint8_t>(*backend, d, dst.size()), expected) << backend->name();
    const Status narrow = backend->Copy2D(d.data(), 32, s.data(), 64, 40, 6);
    EXPECT_EQ(narrow.code(), StatusCode::kInvalidArgument) << backend->name();
    EXPECT_NE(narrow.message().find("at least the width 40"), std::string::npos) << narrow;
    EXPECT_EQ(testing::Download<uint8_t>(*backend, d, dst.size()), expected)
        << "a refused copy writes nothing";
  }
}

}  // namespace
}  // namespace kvtier::gpu
