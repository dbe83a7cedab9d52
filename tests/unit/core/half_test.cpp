// f16 / bf16 / fp8 conversions against exhaustive round trips and known values.
#include "edgeseek/internal/core/half.h"

#include <gtest/gtest.h>

#include <cmath>

namespace es {
namespace {

TEST(Half, F16RoundTripAllValues) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = F16ToF32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToF16(f), h) << "h=" << h;
  }
}

TEST(Half, F16KnownValues) {
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);                      // rounds to inf
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);         // tie to even (zero)
  EXPECT_EQ(F32ToF16(std::ldexp(1.5f, -25)), 0x0001);
}

TEST(Half, BF16) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = BF16ToF32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToBF16(f), h);
  }
  EXPECT_EQ(F32ToBF16(1.00390625f), 0x3f80);  // 1 + 2^-8: tie -> even
}

TEST(Half, F8E4M3) {
  EXPECT_EQ(F8E4M3ToF32(0x38), 1.0f);
  EXPECT_EQ(F8E4M3ToF32(0x7e), 448.0f);
  EXPECT_EQ(F8E4M3ToF32(0xfe), -448.0f);
  EXPECT_EQ(F8E4M3ToF32(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0x7f)));
}

}  // namespace
}  // namespace es
