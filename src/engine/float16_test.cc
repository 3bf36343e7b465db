#include "engine/float16.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace tediserve::engine {
namespace {

// The textbook value of an IEEE binary16 bit pattern, computed independently of the bit tricks.
double ReferenceF16(uint16_t bits) {
  const int sign = (bits & 0x8000) ? -1 : 1;
  const int exp = (bits >> 10) & 0x1f;
  const int mant = bits & 0x3ff;
  if (exp == 0x1f) return mant ? std::nan("") : sign * std::numeric_limits<double>::infinity();
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

TEST(Float16Test, EveryF16BitPatternDecodesExactlyAndRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const float f = F16ToFloat(h);
    const double want = ReferenceF16(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << bits;
      ASSERT_TRUE(std::isnan(F16ToFloat(FloatToF16(f)))) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << bits;
    ASSERT_EQ(std::signbit(f), (bits & 0x8000) != 0) << std::hex << bits;
    ASSERT_EQ(FloatToF16(f), h) << std::hex << bits;
  }
}

TEST(Float16Test, F16KnownValues) {
  EXPECT_EQ(FloatToF16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToF16(-2.5f), 0xc100);
  EXPECT_EQ(FloatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToF16(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToF16(0x1p-14f), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToF16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(FloatToF16(-0.0f), 0x8000);
  EXPECT_EQ(F16ToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(F16ToFloat(0x03ff), 1023 * 0x1p-24f);  // largest subnormal
}

TEST(Float16Test, F16RoundsToNearestEven) {
  EXPECT_EQ(FloatToF16(65519.0f), 0x7bff);  // below the midpoint to 2^16
  EXPECT_EQ(FloatToF16(65520.0f), 0x7c00);  // the midpoint rounds to even: infinity
  EXPECT_EQ(FloatToF16(1e10f), 0x7c00);
  EXPECT_EQ(FloatToF16(1.0f + 0x1p-11f), 0x3c00);        // tie -> even (down)
  EXPECT_EQ(FloatToF16(1.0f + 3 * 0x1p-11f), 0x3c02);    // tie -> even (up)
  EXPECT_EQ(FloatToF16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  EXPECT_EQ(FloatToF16(0x1p-25f), 0x0000);               // tie between 0 and 2^-24 -> 0
  EXPECT_EQ(FloatToF16(0x1.8p-24f), 0x0002);             // tie between 1 and 2 ulp -> 2
  EXPECT_EQ(FloatToF16(0x1.0001p-25f), 0x0001);          // just above the tie
  EXPECT_EQ(FloatToF16(1e-30f), 0x0000);
  EXPECT_EQ(FloatToF16(0x1.ffcp-15f), 0x0400);  // rounds up out of the subnormals
}

TEST(Float16Test, Bf16KnownValuesAndRounding) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(-2.5f), 0xc020);
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(Bf16ToFloat(0xc020), -2.5f);
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f), 0x3f80);       // tie -> even (down)
  EXPECT_EQ(FloatToBf16(1.0f + 3 * 0x1p-8f), 0x3f82);   // tie -> even (up)
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);  // overflow -> inf
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  // A NaN whose payload sits only in the low bits must not become infinity.
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::bit_cast<float>(0x7f800001u)))));
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBf16(f), bits) << std::hex << bits;
  }
}

}  // namespace
}  // namespace tediserve::engine
