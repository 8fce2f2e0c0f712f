// Scalar conversions between float and the narrow formats KV blocks are stored in:
// IEEE fp16, bfloat16 and OCP fp8 e4m3 ("FN": no infinities, max 448, NaN = S.1111.111).
//
// Why hand-written: the CPU references must produce exactly what the CUDA intrinsics
// (__float2half_rn, __float2bfloat16_rn, __nv_cvt_float_to_fp8 with __NV_SATFINITE) do,
// on a machine without the CUDA headers' host fallbacks; every conversion here rounds to
// nearest even like them, and fp8 saturates finite overflow (and infinities) to +-448.
//
// Thread safety: pure functions.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/kv_layout.h"

namespace kvtier::gpu {

inline uint16_t FloatToHalf(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);   // NaN
  if (magnitude >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: inf
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal half, in units of 2^-24
    // Exact scaling by a power of two, then the FPU's round-to-nearest-even.
    const float units = std::nearbyint(std::bit_cast<float>(magnitude) * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(units));
  }
  const uint32_t rounded = magnitude + 0xFFFu + ((magnitude >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));  // exponent 127 -> 15
}

inline float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1Fu;
  const uint32_t mantissa = half & 0x3FFu;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t FloatToBf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

inline float Bf16ToFloat(uint16_t bf16) {
  return std::bit_cast<float>(static_cast<uint32_t>(bf16) << 16);
}

inline constexpr float kFp8E4m3Max = 448.0f;

inline uint8_t FloatToFp8E4m3(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);  // NaN
  const float abs_value = std::bit_cast<float>(magnitude);
  if (abs_value >= kFp8E4m3Max) return static_cast<uint8_t>(sign | 0x7Eu);  // saturate
  if (abs_value < 0.015625f) {  // below 2^-6: subnormal, in units of 2^-9
    const float units = std::nearbyint(abs_value * 512.0f);
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(units));
  }
  const uint32_t rounded = magnitude + 0x7FFFFu + ((magnitude >> 20) & 1u);
  return static_cast<uint8_t>(sign | ((rounded - (120u << 23)) >> 20));  // exponent 127 -> 7
}

inline float Fp8E4m3ToFloat(uint8_t fp8) {
  const uint32_t exponent = (fp8 >> 3) & 0xFu;
  const uint32_t mantissa = fp8 & 0x7u;
  float magnitude;
  if (exponent == 0) {
    magnitude = static_cast<float>(mantissa) * 0.001953125f;  // 2^-9
  } else if (exponent == 15 && mantissa == 7) {
    magnitude = std::nanf("");
  } else {
    magnitude = std::bit_cast<float>(((exponent + 120) << 23) | (mantissa << 20));
  }
  return (fp8 & 0x80u) ? -magnitude : magnitude;
}

// Element i of an fp32, fp16 or bf16 array as a float, and back (rounded to nearest even).
// REQUIRES: a float dtype (others read as 0 and are not written).
inline float LoadFloat(const void* base, KvDtype dtype, size_t i) {
  switch (dtype) {
    case KvDtype::kFp32: return static_cast<const float*>(base)[i];
    case KvDtype::kFp16: return HalfToFloat(static_cast<const uint16_t*>(base)[i]);
    case KvDtype::kBf16: return Bf16ToFloat(static_cast<const uint16_t*>(base)[i]);
    default: return 0.0f;  // unreachable: dtypes are checked first
  }
}

inline void StoreFloat(void* base, KvDtype dtype, size_t i, float value) {
  switch (dtype) {
    case KvDtype::kFp32: static_cast<float*>(base)[i] = value; break;
    case KvDtype::kFp16: static_cast<uint16_t*>(base)[i] = FloatToHalf(value); break;
    case KvDtype::kBf16: static_cast<uint16_t*>(base)[i] = FloatToBf16(value); break;
    default: break;  // unreachable: dtypes are checked first
  }
}

// The largest magnitude a quantized dtype holds after scaling (scale = max|x| / range).
inline float QuantizedRange(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kInt8: return 127.0f;
    case KvDtype::kInt4: return 7.0f;
    default: return kFp8E4m3Max;
  }
}

// Element i of a row of a quantized dtype (int4: two a byte, the even one low), as the
// unscaled value, and back (`scaled` = x / scale, rounded to nearest, saturated).
// REQUIRES: a quantized dtype.
inline float LoadQuantized(const void* row, KvDtype dtype, size_t i) {
  const auto* bytes = static_cast<const uint8_t*>(row);
  switch (dtype) {
    case KvDtype::kInt8: return static_cast<float>(static_cast<int8_t>(bytes[i]));
    case KvDtype::kInt4: {
      const uint8_t nibble = (bytes[i / 2] >> (4 * (i % 2))) & 0xFu;
      return static_cast<float>(nibble >= 8 ? int{nibble} - 16 : int{nibble});
    }
    default: return Fp8E4m3ToFloat(bytes[i]);
  }
}

inline void StoreQuantized(void* row, KvDtype dtype, size_t i, float scaled) {
  auto* bytes = static_cast<uint8_t*>(row);
  const float range = QuantizedRange(dtype);
  const float q = std::clamp(std::nearbyint(scaled), -range, range);
  switch (dtype) {
    case KvDtype::kInt8: bytes[i] = static_cast<uint8_t>(static_cast<int8_t>(q)); break;
    case KvDtype::kInt4: {
      const auto nibble = static_cast<uint8_t>(static_cast<int>(q) & 0xF);
      const int shift = 4 * static_cast<int>(i % 2);
      bytes[i / 2] = static_cast<uint8_t>((bytes[i / 2] & ~(0xFu << shift)) | (nibble << shift));
      break;
    }
    default: bytes[i] = FloatToFp8E4m3(scaled); break;
  }
}

// Scales `n` values of `input` (a float dtype) from `first` by the largest of them into
// `output` (a quantized dtype) from `out_first`, and returns the scale: max|x| / range, 0
// when every value is 0 (they then store as 0).
inline float QuantizeRun(const void* input, KvDtype input_dtype, size_t first, uint32_t n,
                         void* output, KvDtype output_dtype, size_t out_first) {
  float amax = 0.0f;
  for (uint32_t d = 0; d < n; ++d)
    amax = std::max(amax, std::fabs(LoadFloat(input, input_dtype, first + d)));
  const float scale = amax / QuantizedRange(output_dtype);
  for (uint32_t d = 0; d < n; ++d) {
    const float x = LoadFloat(input, input_dtype, first + d);
    StoreQuantized(output, output_dtype, out_first + d, scale > 0.0f ? x / scale : 0.0f);
  }
  return scale;
}

}  // namespace kvtier::gpu
