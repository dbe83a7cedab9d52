// Scalar conversions between f32 and the 16-bit float formats (IEEE f16, bfloat16) and FP8 E4M3.
// These are the references; SIMD kernels convert in bulk (F16C / NEON fp16) and are tested
// against them.
#pragma once

#include <cstdint>
#include <cstring>

namespace es {

inline float BitsToF32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t F32ToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// bfloat16: the top 16 bits of an f32. Rounding to nearest even; NaN stays NaN.
inline float BF16ToF32(uint16_t h) { return BitsToF32(uint32_t(h) << 16); }
inline uint16_t F32ToBF16(float f) {
  uint32_t u = F32ToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// IEEE 754 binary16.
inline float F16ToF32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return BitsToF32(sign);
    // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return BitsToF32(sign | uint32_t(127 - 15 - e) << 23 | mant << 13);
  }
  if (exp == 31) return BitsToF32(sign | 0x7f800000u | mant << 13);
  return BitsToF32(sign | (exp + 127 - 15) << 23 | mant << 13);
}

inline uint16_t F32ToF16(float f) {
  const uint32_t u = F32ToBits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow (incl. rounding) -> inf
  if (abs < 0x38800000u) {                                  // subnormal or zero in f16
    if (abs < 0x33000000u) return uint16_t(sign);           // rounds to zero
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 + (113 - e) ... places mantissa for 2^-24 units
    uint32_t v = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (v & 1u))) ++v;
    return uint16_t(sign | v);
  }
  uint32_t v = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (v & 1u))) ++v;
  return uint16_t(sign | v);
}

// FP8 E4M3 (OCP "fn" variant used by DeepSeek-V3: no infinities, 0x7f/0xff are NaN, max 448).
inline float F8E4M3ToF32(uint8_t b) {
  const uint32_t sign = uint32_t(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t mant = b & 0x7u;
  if (exp == 0xf && mant == 0x7) return BitsToF32(sign | 0x7fc00000u);
  if (exp == 0) {
    // subnormal: mant * 2^-9
    float v = float(mant) * (1.0f / 512.0f);
    return sign ? -v : v;
  }
  return BitsToF32(sign | (exp + 127 - 7) << 23 | mant << 20);
}

}  // namespace es
