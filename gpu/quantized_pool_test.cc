// Quantized pools (int8, int4, fp8_e4m3 with a scale per token and head beside the block's
// values): UpdatePaged scales and rounds each token's head and stores the scale where the
// layout says; the values read back within half a step of the scale; chunked and decode
// attention over the pool stay within each dtype's bound of the same attention over an fp16
// pool; on every backend, and the CUDA backend's bytes are the CPU reference's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "gpu/numeric.h"
#include "gpu/testing/backends.h"
#include "gpu/testing/quantized_attention.h"

namespace kvtier::gpu {
namespace {

using testing::Download;
using testing::RandomFloats;
using testing::Upload;

constexpr KvDtype kQuantized[] = {KvDtype::kInt8, KvDtype::kInt4, KvDtype::kFp8E4m3};

// Three tokens (the second padding) of 2 heads x 8 into layer 1's values of a 2-block pool
// of `dtype`: the pool's bytes after the update.
std::vector<uint8_t> UpdatedPool(KernelBackend& backend, const KvLayout& layout,
                                 const std::vector<float>& update) {
  const std::vector<int64_t> slots = {6, -1, 1};  // block 1 token 2, skip, block 0 token 1
  DeviceBuffer pool = Upload(backend, std::vector<uint8_t>(2 * layout.bytes_per_block()));
  DeviceBuffer u = Upload(backend, update), sl = Upload(backend, slots);
  PagedUpdateArgs args{pool.data(), 2, &layout, 1, KvPart::kValue, u.data(), sl.as<int64_t>(), 3};
  args.update_dtype = KvDtype::kFp32;
  const Status updated = backend.UpdatePaged(args);
  EXPECT_TRUE(updated.ok()) << backend.name() << ": " << updated;
  return Download<uint8_t>(backend, pool, 2 * layout.bytes_per_block());
}

KvLayout QuantizedLayout(KvDtype dtype) {
  return KvLayout::Create({.num_layers = 2,
                           .num_kv_heads = 2,
                           .head_dim = 8,
                           .tokens_per_block = 4,
                           .dtype = dtype})
      .value();
}

TEST(QuantizedPoolTest, UpdatePagedStoresScaledValuesAndTheirScalesWhereTheLayoutSays) {
  for (auto& backend : testing::TestBackends()) {
    for (const KvDtype dtype : kQuantized) {
      const KvLayout layout = QuantizedLayout(dtype);
      const std::vector<float> update = RandomFloats(3 * 2 * 8, 5);  // 3 tokens x 2 heads x 8
      const std::vector<uint8_t> bytes = UpdatedPool(*backend, layout, update);
      for (const auto& [t, block, token] : {std::tuple{0u, 1u, 2u}, std::tuple{2u, 0u, 1u}}) {
        for (uint32_t h = 0; h < 2; ++h) {
          const float* x = &update[(t * 2 + h) * 8];
          float amax = 0;
          for (int d = 0; d < 8; ++d) amax = std::max(amax, std::fabs(x[d]));
          const uint8_t* b = bytes.data() + block * layout.bytes_per_block();
          float scale = 0;
          std::memcpy(&scale, b + layout.ScaleOffset(1, KvPart::kValue, h, token), 4);
          EXPECT_FLOAT_EQ(scale, amax / QuantizedRange(dtype)) << DtypeName(dtype);
          const uint8_t* row = b + layout.ByteOffset(1, KvPart::kValue, h, token);
          for (uint32_t d = 0; d < 8; ++d) {
            const float back = LoadQuantized(row, dtype, d) * scale;
            // Integers: half a step; fp8 e4m3: 3 mantissa bits, half of 2^-3 relative.
            const float bound =
                dtype == KvDtype::kFp8E4m3 ? std::fabs(x[d]) / 16 + 1e-6f : scale / 2 + 1e-6f;
            EXPECT_NEAR(back, x[d], bound) << DtypeName(dtype) << " token " << t << " d " << d;
          }
        }
      }
      // Nothing else of the pool was written: the skipped token's slot and layer 0 stay zero.
      const uint8_t* b0 = bytes.data();
      for (size_t i = 0; i < layout.bytes_per_head_row(); ++i)
        EXPECT_EQ(b0[layout.ByteOffset(0, KvPart::kValue, 0, 1) + i], 0) << DtypeName(dtype);
    }
  }
}

TEST(QuantizedPoolTest, AttentionOverAQuantizedPoolStaysNearTheFp16Pools) {
  for (auto& backend : testing::TestBackends()) {
    SCOPED_TRACE(std::string(backend->name()));
    // Bounds on the output (values in [-1, 1]): int8's step is 1/127 of a head's largest
    // value, int4's 1/7, fp8's a sixteenth relative.
    const std::pair<KvDtype, float> bounds[] = {
        {KvDtype::kInt8, 0.02f}, {KvDtype::kInt4, 0.2f}, {KvDtype::kFp8E4m3, 0.08f}};
    for (const auto& [dtype, bound] : bounds) {
      const testing::AttentionError e = testing::QuantizedAgainstFp16(*backend, dtype);
      ASSERT_TRUE(e.status.ok()) << DtypeName(dtype) << ": " << e.status;
      EXPECT_LT(e.max_abs, bound) << DtypeName(dtype);
      EXPECT_LT(e.rms, bound / 4) << DtypeName(dtype);
      EXPECT_GT(e.rms, 0.0f) << DtypeName(dtype) << ": quantized, so not exact";
    }
    // And the fp16 pool against itself through the same path: exactly 0.
    EXPECT_EQ(testing::QuantizedAgainstFp16(*backend, KvDtype::kFp16).max_abs, 0.0f);
  }
}

// Where a device answers: the CUDA update writes the CPU reference's bytes (the same
// scale, the same rounding to even), and its attention errs as the CPU's does.
TEST(QuantizedPoolTest, TheCudaBackendWritesAndReadsWhatTheCpuReferenceDoes) {
  auto cpu = MakeCpuBackend();
  std::vector<std::unique_ptr<KernelBackend>> backends = testing::TestBackends();
  if (backends.size() < 2) GTEST_SKIP() << "no CUDA device";
  for (auto& backend : backends) {
    if (backend->name() == cpu->name()) continue;
    for (const KvDtype dtype : kQuantized) {
      const KvLayout layout = QuantizedLayout(dtype);
      const std::vector<float> update = RandomFloats(3 * 2 * 8, 11);
      EXPECT_EQ(UpdatedPool(*backend, layout, update), UpdatedPool(*cpu, layout, update))
          << DtypeName(dtype);
      const testing::AttentionError on_device = testing::QuantizedAgainstFp16(*backend, dtype);
      const testing::AttentionError reference = testing::QuantizedAgainstFp16(*cpu, dtype);
      ASSERT_TRUE(on_device.status.ok()) << DtypeName(dtype) << ": " << on_device.status;
      EXPECT_NEAR(on_device.max_abs, reference.max_abs, 1e-5f) << DtypeName(dtype);
      EXPECT_NEAR(on_device.rms, reference.rms, 1e-5f) << DtypeName(dtype);
    }
  }
}

}  // namespace
}  // namespace kvtier::gpu
