// Conversions between fp32 and the 16-bit float formats found in checkpoints (IEEE binary16
// "F16" and bfloat16 "BF16"). Header-only so the per-element loops of the loaders inline them.
#pragma once

#include <bit>
#include <cstdint>

namespace tediserve::engine {

// Exact: every bf16 value is an fp32 value with the low 16 bits zero.
inline float Bf16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// Exact for every input, including subnormals, infinities and NaN (payload kept).
inline float F16ToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu;
  const uint32_t mant = bits & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24 is exact in fp32.
  const float magnitude = static_cast<float>(mant) * 0x1p-24f;
  return sign ? -magnitude : magnitude;
}

// Round to nearest, ties to even; overflow gives infinity; NaN stays a (quiet) NaN.
inline uint16_t FloatToBf16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Round to nearest, ties to even (also into the subnormal range); values that round past
// 65504 give infinity; NaN stays a (quiet) NaN.
inline uint16_t FloatToF16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 2^16, or infinity
  if (abs >= 0x38800000u) {                       // normal f16 range, [2^-14, 2^16)
    uint32_t h = (((abs >> 23) - 112) << 10) | ((abs >> 13) & 0x3ffu);
    const uint32_t rest = abs & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry may give infinity
    return static_cast<uint16_t>(sign | h);
  }
  if (abs <= 0x33000000u) return sign;  // <= 2^-25: rounds to zero (2^-25 is a tie to even 0)
  // Subnormal f16: the result is round(|value| * 2^24); rounding up may give the smallest normal.
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - (abs >> 23);  // 14..24
  uint32_t h = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

}  // namespace tediserve::engine
