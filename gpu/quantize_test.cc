// Narrow-format conversions and per-token quantization: exact encodings at the edges,
// every representable value round-trips, and quantization error stays within its bound.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu/numeric.h"
#include "gpu/testing/backends.h"

namespace kvtier::gpu {
namespace {

using testing::Download;
using testing::RandomFloats;
using testing::TestBackends;
using testing::Upload;

TEST(NumericTest, HalfEncodingsAtTheEdges) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);                          // the largest half
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);                          // still rounds down
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);                          // rounds to infinity
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);             // the smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -26)), 0x0000);             // below half of it
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // a tie goes to even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // and up to even
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
}

TEST(NumericTest, EveryHalfAndBf16ValueRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0) continue;  // NaNs keep no payload
    ASSERT_EQ(FloatToHalf(HalfToFloat(h)), h) << std::hex << bits;
    if ((h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0) continue;
    ASSERT_EQ(FloatToBf16(Bf16ToFloat(h)), h) << std::hex << bits;
  }
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // a tie goes to even
}

TEST(NumericTest, Fp8E4m3EncodingsAndRoundTrip) {
  EXPECT_EQ(FloatToFp8E4m3(448.0f), 0x7E);
  EXPECT_EQ(FloatToFp8E4m3(1000.0f), 0x7E);  // saturates, never NaN
  EXPECT_EQ(FloatToFp8E4m3(-INFINITY), 0xFE);
  EXPECT_EQ(FloatToFp8E4m3(1.0f), 0x38);
  EXPECT_EQ(FloatToFp8E4m3(std::ldexp(1.0f, -9)), 0x01);  // the smallest subnormal
  EXPECT_EQ(FloatToFp8E4m3(1.0625f), 0x38);               // a tie between 1 and 1.125 goes to even
  EXPECT_EQ(FloatToFp8E4m3(1.1875f), 0x3A);  // a tie between 1.125 and 1.25 goes to even
  for (uint32_t bits = 0; bits <= 0xFF; ++bits) {
    if ((bits & 0x7F) == 0x7F) continue;  // NaN
    ASSERT_EQ(FloatToFp8E4m3(Fp8E4m3ToFloat(static_cast<uint8_t>(bits))), bits) << std::hex << bits;
  }
}

std::vector<uint16_t> ToHalves(const std::vector<float>& values) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = FloatToHalf(values[i]);
  return out;
}

// Rows of very different magnitudes (and one all-zero row) in fp16.
std::vector<float> TestRows(uint32_t tokens, uint32_t heads, uint32_t dim) {
  std::vector<float> values = RandomFloats(size_t{tokens} * heads * dim, 11);
  for (size_t row = 0; row < size_t{tokens} * heads; ++row) {
    const float magnitude = row == 3 ? 0.0f : std::ldexp(1.0f, static_cast<int>(row % 9) - 4);
    for (uint32_t d = 0; d < dim; ++d)
      values[row * dim + d] = HalfToFloat(FloatToHalf(values[row * dim + d] * magnitude));
  }
  return values;
}

TEST(QuantizeTest, Int8AndFp8StayWithinTheirErrorBounds) {
  const uint32_t tokens = 5, heads = 3, dim = 40;
  const std::vector<float> values = TestRows(tokens, heads, dim);
  const std::vector<uint16_t> input = ToHalves(values);
  for (KvDtype format : {KvDtype::kInt8, KvDtype::kFp8E4m3}) {
    for (auto& backend : TestBackends()) {
      DeviceBuffer in = Upload(*backend, input),
                   q = Upload(*backend, std::vector<uint8_t>(values.size()));
      DeviceBuffer scales = Upload(*backend, std::vector<float>(tokens * heads));
      DeviceBuffer out = Upload(*backend, std::vector<float>(values.size()));
      ASSERT_TRUE(backend
                      ->Quantize({in.data(), KvDtype::kFp16, q.data(), format, scales.as<float>(),
                                  tokens, heads, dim})
                      .ok());
      ASSERT_TRUE(backend
                      ->Dequantize({q.data(), format, scales.as<float>(), out.data(),
                                    KvDtype::kFp32, tokens, heads, dim})
                      .ok());
      const std::vector<float> scale = Download<float>(*backend, scales, tokens * heads);
      const std::vector<float> restored = Download<float>(*backend, out, values.size());
      for (size_t row = 0; row < size_t{tokens} * heads; ++row) {
        float amax = 0;
        for (uint32_t d = 0; d < dim; ++d) amax = std::max(amax, std::fabs(values[row * dim + d]));
        ASSERT_EQ(scale[row], amax / (format == KvDtype::kInt8 ? 127.0f : 448.0f)) << row;
        for (uint32_t d = 0; d < dim; ++d) {
          const float x = values[row * dim + d], err = std::fabs(restored[row * dim + d] - x);
          // int8: half a step. fp8 e4m3: half an ulp of 3 mantissa bits (2^-4 relative), or
          // half the subnormal step 2^-9 of the scaled value; plus float rounding.
          const float bound =
              format == KvDtype::kInt8
                  ? scale[row] * 0.5f
                  : std::max(std::fabs(x) * 0.0625f, scale[row] * std::ldexp(1.0f, -10));
          ASSERT_LE(err, bound * 1.0001f + 1e-12f)
              << backend->name() << " row " << row << " d " << d;
        }
      }
    }
  }
}

TEST(QuantizeTest, DequantizeWritesEveryFloatDtype) {
  const std::vector<int8_t> q = {-127, 0, 64, 127};
  const std::vector<float> scales = {0.5f};
  auto backend = MakeCpuBackend();
  std::vector<uint16_t> half(4), bf16(4);
  ASSERT_TRUE(backend
                  ->Dequantize({q.data(), KvDtype::kInt8, scales.data(), half.data(),
                                KvDtype::kFp16, 1, 1, 4})
                  .ok());
  ASSERT_TRUE(backend
                  ->Dequantize({q.data(), KvDtype::kInt8, scales.data(), bf16.data(),
                                KvDtype::kBf16, 1, 1, 4})
                  .ok());
  const std::vector<float> expected = {-63.5f, 0.0f, 32.0f, 63.5f};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(HalfToFloat(half[i]), expected[i]);
    EXPECT_EQ(Bf16ToFloat(bf16[i]), Bf16ToFloat(FloatToBf16(expected[i])));
  }
  EXPECT_EQ(backend
                ->Dequantize(
                    {q.data(), KvDtype::kFp16, scales.data(), half.data(), KvDtype::kFp16, 1, 1, 4})
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::gpu
