// SIMD bodies of the block-quantized CPU matmul, compiled per target by matmul.cpp: weights
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K (llama.cpp layouts) and I4G (edgeseek),
// include/edgeseek/internal/quant/blocks.h, × f32 activations.
//
// Activations. Each row is quantized once per call, per group of 32, to int8 with an f32 scale
// (dx = absmax / 127, q = round-to-nearest-even(x / dx)), keeping dx·Σq per group for the
// K-quant minimums — a function of that row alone, so rows stay independent. (Per-32 scales
// rather than Q8_K's per-256: the same cost here and a smaller activation error.)
// Q8_0 weights take int16 activations instead (dx = absmax / 32512, |q| <= 32512 = 127 · 256):
// with 8-bit weights the int8 activation rounding was the larger half of the error (it halved
// Q8_0's top-1 agreement margin on the golden models, docs/quantization.md); the int16 dot
// (sign-extend the weights, madd) costs about what maddubs does. 32512 rather than 32767 keeps
// activations that are k · 2^e with block absmax 127 · 2^e exact, as with int8.
//
// Weights. Every weight block is seen as G groups of 32 elements (G = BlockElems / 32), each
// decoded to 32 int8 quants q, two int16 scales (sA for elements 0..15, sB for 16..31), a float
// multiplier fd and a float minimum fm:
//   Q8_0, Q4_0 (q - 8), I4G (q - 8):  sA = sB = 1,          fd = d,  fm = 0
//   Q5_0 (q - 16):                    sA = sB = 1,          fd = d,  fm = 0
//   Q4_1, Q5_1 (q unsigned):          sA = sB = 1,          fd = d,  fm = −m   (x = d·q + m)
//   Q4_K, Q5_K:                       sA = sB = sc[g],      fd = d,  fm = dmin · mn[g]
//   Q6_K (q - 32):                    sA, sB = scales[2g], scales[2g+1], fd = d, fm = 0
// so that  Σ_{j<32} w_j x_j ≈ fd · dx · (sA Σ_{j<16} q_j qx_j + sB Σ_{j>=16} q_j qx_j)
//                                − fm · dx Σ_j qx_j.
// The integer part is exact. The float part is accumulated in a fixed order:
//   x86 (AVX2 and up): the integer part as 8 int32 lanes (each the sum of 4 consecutive
//     products, maddubs + madd with the scales), converted to f32 and FMA'd lane-wise into one
//     accumulator, groups in order; minimums into one scalar; one horizontal sum at the end;
//   ARM64: matmul_quant_arm.cpp (plain NEON, dotprod, i8mm; acc = fma(fd·dx, float(isum), acc)
//     per output and group in order, the same bits on all three paths and in GEMV and GEMM);
//   other targets: scalar, groups in order.
// GEMV (R = 1) and GEMM run the same non-inlined row kernel, so every output element sees the
// same operations whatever R, the other rows or the thread count (batch invariance).
// Q4_0 and Q8_0 on x86 take the column-lane kernels of matmul_lanes-inl.h instead (8 columns in
// the 8 f32 lanes, one FMA per block and output; their own reduction order, the same in GEMV and
// GEMM), and Q4_K / Q5_K / Q6_K those of matmul_lanes_k-inl.h (per group of 32 one FMA for the
// scales and, Q4_K / Q5_K, one for the minimums, 8 outputs at once).

#ifndef ES_CPU_KERNELS_MATMUL_QUANT_ONCE_
#define ES_CPU_KERNELS_MATMUL_QUANT_ONCE_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "cpu/kernels/block_dispatch.h"
#include "edgeseek/internal/core/dtype.h"
#include "edgeseek/internal/quant/blocks.h"

namespace es::cpu {

inline bool QuantMatMulSupports(DType t) {
  return DispatchBlockType(t, [](auto) {});
}

// Quantized activations of one row: qs [K] int8, d [K/32] scales, s [K/32] = d · Σ qs of the
// group. Non-finite inputs make the group's d and s NaN (NaN outputs, as in f32).
inline void QuantizeActivationRow(const float* x, int64_t K, int8_t* qs, float* d, float* s) {
  for (int64_t b = 0; b < K / kQK; ++b) {
    const float* xb = x + b * kQK;
    int8_t* qb = qs + b * kQK;
    float amax = 0.0f;
    bool finite = true;
    for (int j = 0; j < kQK; ++j) {
      amax = std::max(amax, std::fabs(xb[j]));
      finite = finite && std::isfinite(xb[j]);
    }
    if (!finite) {
      d[b] = s[b] = std::numeric_limits<float>::quiet_NaN();
      std::fill(qb, qb + kQK, int8_t(0));
      continue;
    }
    const float db = amax / 127.0f;
    const float id = db != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      qb[j] = int8_t(std::nearbyint(xb[j] * id));
      sum += qb[j];
    }
    d[b] = db;
    s[b] = db * float(sum);
  }
}

// The int16 activations of Q8_0 weights: qs [K] int16, d [K/32] (see the header comment).
inline constexpr float kWideActMax = 32512.0f;
inline void QuantizeActivationRowWide(const float* x, int64_t K, int16_t* qs, float* d) {
  for (int64_t b = 0; b < K / kQK; ++b) {
    const float* xb = x + b * kQK;
    int16_t* qb = qs + b * kQK;
    float amax = 0.0f;
    bool finite = true;
    for (int j = 0; j < kQK; ++j) {
      amax = std::max(amax, std::fabs(xb[j]));
      finite = finite && std::isfinite(xb[j]);
    }
    if (!finite) {
      d[b] = std::numeric_limits<float>::quiet_NaN();
      std::fill(qb, qb + kQK, int16_t(0));
      continue;
    }
    const float id = amax != 0.0f ? kWideActMax / amax : 0.0f;
    for (int j = 0; j < kQK; ++j) qb[j] = int16_t(std::nearbyint(xb[j] * id));
    d[b] = amax / kWideActMax;
  }
}

}  // namespace es::cpu
#endif  // ES_CPU_KERNELS_MATMUL_QUANT_ONCE_

// matmul_quant_arm.cpp (not a Highway translation unit) takes only the quantizers above.
#ifndef ES_CPU_QUANT_ACTIVATIONS_ONLY
#if defined(ES_CPU_KERNELS_MATMUL_QUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ES_CPU_KERNELS_MATMUL_QUANT_INL_H_
#undef ES_CPU_KERNELS_MATMUL_QUANT_INL_H_
#else
#define ES_CPU_KERNELS_MATMUL_QUANT_INL_H_
#endif

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "cpu/kernels/kquant_scales.h"
#include "cpu/kernels/matmul_quant_arm.h"
#include "cpu/kernels/scratch.h"
#include "cpu/kernels/task_grid.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/core/thread_pool.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"

#undef ES_QUANT_X86
#undef ES_QUANT_VNNI
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#include <immintrin.h>
#define ES_QUANT_X86 1
#else
#define ES_QUANT_X86 0
#endif
// AVX512-VNNI (Highway's AVX3_DL target, compiled because matmul.cpp defines HWY_WANT_AVX3_DL):
// vpdpbusd / vpdpwssd replace maddubs + madd / madd + add with the same int32 lanes.
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL
#define ES_QUANT_VNNI 1
#else
#define ES_QUANT_VNNI 0
#endif
// Q4_0, Q8_0, Q4_K and Q5_K on x86: the column-lane GEMV/GEMM (their own files; they need
// ES_QUANT_X86 only).
#include "cpu/kernels/matmul_lanes-inl.h"
#include "cpu/kernels/matmul_lanes_k-inl.h"

HWY_BEFORE_NAMESPACE();
namespace es::cpu {
namespace HWY_NAMESPACE {

// ---------------------------------------------------------------------------------------------
// Per-type traits: groups of 32 per block, and whether the type has minimums.

template <class Block>
struct QuantTraits;
template <int Groups, bool Mins>
struct QuantTraitsOf {
  static constexpr int kGroups = Groups;
  static constexpr bool kMins = Mins;
};
template <>
struct QuantTraits<BlockQ8_0> : QuantTraitsOf<1, false> {};
template <>
struct QuantTraits<BlockQ4_0> : QuantTraitsOf<1, false> {};
template <>
struct QuantTraits<BlockI4G> : QuantTraitsOf<kQKI4G / kQK, false> {};
template <>
struct QuantTraits<BlockQ4_K> : QuantTraitsOf<kQKK / kQK, true> {};
template <>
struct QuantTraits<BlockQ6_K> : QuantTraitsOf<kQKK / kQK, false> {};
template <>
struct QuantTraits<BlockQ4_1> : QuantTraitsOf<1, true> {};
template <>
struct QuantTraits<BlockQ5_0> : QuantTraitsOf<1, false> {};
template <>
struct QuantTraits<BlockQ5_1> : QuantTraitsOf<1, true> {};
template <>
struct QuantTraits<BlockQ5_K> : QuantTraitsOf<kQKK / kQK, true> {};

// Types whose group quants are never negative: they go into maddubs unsigned directly.
template <class Block>
inline constexpr bool kUnsignedQuants =
    std::is_same_v<Block, BlockQ4_K> || std::is_same_v<Block, BlockQ5_K> ||
    std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>;
// Types with one int16 sub-scale per group of 32 (K-quants with 6-bit scales).
template <class Block>
inline constexpr bool kGroupScale =
    std::is_same_v<Block, BlockQ4_K> || std::is_same_v<Block, BlockQ5_K>;

HWY_INLINE float HalfToF32(uint16_t h) {
#if ES_QUANT_X86
  return _cvtsh_ss(h);
#else
  return F16ToF32(h);
#endif
}

// Block-level scalars: fd, and per-group int16 scales (sA, sB) and minimums fm.
template <class Block>
struct BlockScalars {
  static constexpr int G = QuantTraits<Block>::kGroups;
  float fd;
  int16_t sa[G], sb[G];
  float fm[G];
};

HWY_INLINE void DecodeScalars(const BlockQ8_0& b, BlockScalars<BlockQ8_0>* s) {
  s->fd = HalfToF32(b.d);
  s->sa[0] = s->sb[0] = 1;
  s->fm[0] = 0.0f;
}
HWY_INLINE void DecodeScalars(const BlockQ4_0& b, BlockScalars<BlockQ4_0>* s) {
  s->fd = HalfToF32(b.d);
  s->sa[0] = s->sb[0] = 1;
  s->fm[0] = 0.0f;
}
HWY_INLINE void DecodeScalars(const BlockI4G& b, BlockScalars<BlockI4G>* s) {
  s->fd = HalfToF32(b.d);
  for (int g = 0; g < 4; ++g) {
    s->sa[g] = s->sb[g] = 1;
    s->fm[g] = 0.0f;
  }
}
HWY_INLINE void DecodeScalars(const BlockQ4_1& b, BlockScalars<BlockQ4_1>* s) {
  s->fd = HalfToF32(b.d);
  s->sa[0] = s->sb[0] = 1;
  s->fm[0] = -HalfToF32(b.m);
}
HWY_INLINE void DecodeScalars(const BlockQ5_0& b, BlockScalars<BlockQ5_0>* s) {
  s->fd = HalfToF32(b.d);
  s->sa[0] = s->sb[0] = 1;
  s->fm[0] = 0.0f;
}
HWY_INLINE void DecodeScalars(const BlockQ5_1& b, BlockScalars<BlockQ5_1>* s) {
  s->fd = HalfToF32(b.d);
  s->sa[0] = s->sb[0] = 1;
  s->fm[0] = -HalfToF32(b.m);
}
// Q4_K and Q5_K share the 6-bit scale/min packing.
template <class BlockK>
HWY_INLINE void DecodeScalarsK(const BlockK& b, BlockScalars<BlockK>* s) {
  s->fd = HalfToF32(b.d);
  const float dmin = HalfToF32(b.dmin);
  UnpackScalesMinsK(b.scales, dmin, s);
}
HWY_INLINE void DecodeScalars(const BlockQ4_K& b, BlockScalars<BlockQ4_K>* s) {
  DecodeScalarsK(b, s);
}
HWY_INLINE void DecodeScalars(const BlockQ5_K& b, BlockScalars<BlockQ5_K>* s) {
  DecodeScalarsK(b, s);
}
HWY_INLINE void DecodeScalars(const BlockQ6_K& b, BlockScalars<BlockQ6_K>* s) {
  s->fd = HalfToF32(b.d);
  // Group g = 4h + gg covers elements 128h + 32gg ..; its halves use scales[8h + 2gg (+1)].
  for (int g = 0; g < 8; ++g) {
    s->sa[g] = b.scales[2 * g];
    s->sb[g] = b.scales[2 * g + 1];
    s->fm[g] = 0.0f;
  }
}

// ---------------------------------------------------------------------------------------------
// The 32 quants of group g, as signed int8 (lane j = element 32g + j).

#if ES_QUANT_X86
using QVec = __m256i;

HWY_INLINE __m256i LowNibbles(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
HWY_INLINE __m256i HighNibbles(__m256i v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
}
HWY_INLINE __m256i LoadU256(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

HWY_INLINE __m256i GroupQuants(const BlockQ8_0& b, int) { return LoadU256(b.qs); }
// Q4_0: low nibbles are elements 0..15, high nibbles 16..31; minus 8.
HWY_INLINE __m256i GroupQuants(const BlockQ4_0& b, int) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
  return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}
// I4G: element 2i in the low nibble of byte i, 2i+1 in the high one; minus 8.
HWY_INLINE __m256i GroupQuants(const BlockI4G& b, int g) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 16 * g));
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
  return _mm256_sub_epi8(_mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi)),
                         _mm256_set1_epi8(8));
}
// Q4_1: as Q4_0 without the offset (0..15).
HWY_INLINE __m256i GroupQuants(const BlockQ4_1& b, int) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
}
// The 32 bits of qh as 32 bytes, 0x10 where the bit is set (byte j <- bit j).
HWY_INLINE __m256i FifthBits(const uint8_t* qh4) {
  uint32_t qh;
  std::memcpy(&qh, qh4, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(qh)), _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                   2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
                          _mm256_set1_epi8(0x10));
}
// Q5_1: Q4_1's nibbles | fifth bit (0..31); Q5_0: the same minus 16.
HWY_INLINE __m256i GroupQuants(const BlockQ5_1& b, int) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m256i lo =
      _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
  return _mm256_or_si256(lo, FifthBits(b.qh));
}
HWY_INLINE __m256i GroupQuants(const BlockQ5_0& b, int) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m256i lo =
      _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
  return _mm256_sub_epi8(_mm256_or_si256(lo, FifthBits(b.qh)), _mm256_set1_epi8(16));
}
// Q5_K: Q4_K's nibbles | bit g of qh[l] as bit 4.
HWY_INLINE __m256i GroupQuants(const BlockQ5_K& b, int g) {
  const __m256i v = LoadU256(b.qs + 32 * (g / 2));
  const __m256i lo = (g & 1) ? HighNibbles(v) : LowNibbles(v);
  const __m256i h = _mm256_srl_epi16(LoadU256(b.qh), _mm_cvtsi32_si128(g));
  return _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(1)), 4));
}
// Q4_K: 64-chunk c = g/2 holds group 2c in the low nibbles of qs[32c..], 2c+1 in the high ones.
HWY_INLINE __m256i GroupQuants(const BlockQ4_K& b, int g) {
  const __m256i v = LoadU256(b.qs + 32 * (g / 2));
  return (g & 1) ? HighNibbles(v) : LowNibbles(v);
}
// Q6_K: group 4h + gg: 4 low bits from ql[64h + 32(gg & 1) ..] (low nibble for gg < 2, high
// for gg >= 2), 2 high bits from qh[32h ..] at bit 2gg; minus 32.
HWY_INLINE __m256i GroupQuants(const BlockQ6_K& b, int g) {
  const int h = g / 4, gg = g % 4;
  const __m256i l = LoadU256(b.ql + 64 * h + 32 * (gg & 1));
  const __m256i lo4 = gg >= 2 ? HighNibbles(l) : LowNibbles(l);
  const __m256i qh = _mm256_srl_epi16(LoadU256(b.qh + 32 * h), _mm_cvtsi32_si128(2 * gg));
  const __m256i hi2 = _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(3)), 4);
  return _mm256_sub_epi8(_mm256_or_si256(lo4, hi2), _mm256_set1_epi8(32));
}

// Types whose groups carry int16 sub-scales (the others multiply by 1).
template <class Block>
inline constexpr bool kScaled = kGroupScale<Block> || std::is_same_v<Block, BlockQ6_K>;

#if ES_QUANT_VNNI
// Through asm with the EVEX form: Highway 1.0.3's AVX3_DL target string enables avxvnni (the VEX
// form, absent on e.g. Ice Lake) but not avx512vnni, while its run-time check requires
// AVX512-VNNI — the EVEX form is the one that check guarantees. acc += Σ_4 u8 × s8 per lane.
HWY_INLINE __m256i DpBusd(__m256i acc, __m256i u, __m256i s) {
  asm("%{evex%} vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}
// acc += Σ_2 s16 × s16 per lane (no saturation: the same value as madd + add).
HWY_INLINE __m256i DpWssd(__m256i acc, __m256i a, __m256i b) {
  asm("%{evex%} vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}
#endif

// Lane i = scale · Σ_{j=4i..4i+3} u_j s_j (u unsigned, s signed int8); the scale of element 4i
// (sA or sB) from scales16. Exact int32 either way: maddubs' int16 pair sums stay below 32767
// because |u| <= 128 and |s| <= 127 never meet at 128 · 128 (Q8_0, whose quants reach -128, takes
// the wide path).
template <class Block>
HWY_INLINE __m256i DotU8S8(__m256i u, __m256i s, __m256i scales16) {
#if ES_QUANT_VNNI
  if constexpr (!kScaled<Block>) return DpBusd(_mm256_setzero_si256(), u, s);
#endif
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scales16);
}

// sA Σ_{j<16} q_j x_j + sB Σ_{j>=16} q_j x_j as 8 f32 lanes (lane i: products 4i..4i+3, exact
// int32 before the conversion). maddubs wants unsigned × signed: |q| × (x with q's sign).
template <class Block>
HWY_INLINE __m256 GroupDot(__m256i q, __m256i x, __m256i scales16) {
  const __m256i aq = _mm256_sign_epi8(q, q);
  const __m256i sx = _mm256_sign_epi8(x, q);
  return _mm256_cvtepi32_ps(DotU8S8<Block>(aq, sx, scales16));
}

// The int16 scales of a group as a vector: sA in the low 128 bits, sB in the high ones (Q6_K),
// one scale everywhere (Q4_K), ones (types without sub-scales).
template <class Block>
HWY_INLINE __m256i ScaleVector(int16_t sa, int16_t sb) {
  if constexpr (std::is_same_v<Block, BlockQ6_K>) {
    return _mm256_set_m128i(_mm_set1_epi16(sb), _mm_set1_epi16(sa));
  } else if constexpr (kGroupScale<Block>) {
    return _mm256_set1_epi16(sa);
  } else {
    return _mm256_set1_epi16(1);
  }
}

// GroupDot for the GEMV row kernel, cheaper where the quants allow and giving the very same int32
// lanes (integer arithmetic is exact): Q4_K's quants are already non-negative, so they go
// straight into maddubs. (Q4_0 on x86 has its own kernels, matmul_q4_0-inl.h.)
template <class Block>
HWY_INLINE __m256 GroupDotGemv(const Block& blk, int g, __m256i x, __m256i scales16) {
  if constexpr (kUnsignedQuants<Block>) {
    return _mm256_cvtepi32_ps(DotU8S8<Block>(GroupQuants(blk, g), x, scales16));
  } else {
    return GroupDot<Block>(GroupQuants(blk, g), x, scales16);
  }
}

HWY_INLINE float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Σ q_j x_j over 32 int8 weights × int16 activations as 8 f32 lanes (lane i: elements 2i, 2i+1,
// 16+2i, 16+2i+1; exact int32: |sum| <= 4 · 128 · 32512).
HWY_INLINE __m256 WideDot(const int8_t* q, const int16_t* x) {
  const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  const __m256i w1 =
      _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)));
#if ES_QUANT_VNNI
  return _mm256_cvtepi32_ps(
      DpWssd(DpWssd(_mm256_setzero_si256(), w0, LoadU256(x)), w1, LoadU256(x + 16)));
#else
  return _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_madd_epi16(w0, LoadU256(x)),
                                             _mm256_madd_epi16(w1, LoadU256(x + 16))));
#endif
}
#endif  // ES_QUANT_X86

// Q8_0 × int16 activations: NR columns of one row (the wide counterpart of QuantDotRows, which
// GEMV and, off x86, GEMM call). xq: [nb * 32] int16, xd: [nb]. Not inlined, as QuantDotRows.
template <int NR>
HWY_NOINLINE void WideDotRows(const int16_t* HWY_RESTRICT xq, const float* HWY_RESTRICT xd,
                              size_t nb, const BlockQ8_0* HWY_RESTRICT w, size_t w_stride,
                              float* HWY_RESTRICT out) {
  static_assert(NR >= 1 && NR <= 4, "WideDotRows handles 1..4 columns");
#if ES_QUANT_X86
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const char* next = reinterpret_cast<const char*>(w + NR * w_stride);
  for (size_t b = 0; b < nb; ++b) {
    if constexpr (NR > 1) {
      for (size_t o = 0; o < NR * sizeof(BlockQ8_0); o += 64)
        hwy::Prefetch(next + b * NR * sizeof(BlockQ8_0) + o);
    }
#define ES_WIDE_COL(c)                                               \
  if constexpr (NR > c) {                                            \
    const BlockQ8_0& blk = w[c * w_stride + b];                      \
    a##c = _mm256_fmadd_ps(_mm256_set1_ps(HalfToF32(blk.d) * xd[b]), \
                           WideDot(blk.qs, xq + b * kQK), a##c);     \
  }
    ES_WIDE_COL(0)
    ES_WIDE_COL(1)
    ES_WIDE_COL(2)
    ES_WIDE_COL(3)
#undef ES_WIDE_COL
  }
  out[0] = HorizontalSum(a0);
  if constexpr (NR > 1) out[1] = HorizontalSum(a1);
  if constexpr (NR > 2) out[2] = HorizontalSum(a2);
  if constexpr (NR > 3) out[3] = HorizontalSum(a3);
#else
  for (int c = 0; c < NR; ++c) {
    float acc = 0.0f;
    for (size_t b = 0; b < nb; ++b) {
      const BlockQ8_0& blk = w[c * w_stride + b];
      int32_t dot = 0;
      for (int j = 0; j < kQK; ++j) dot += int32_t(blk.qs[j]) * int32_t(xq[b * kQK + size_t(j)]);
      acc += HalfToF32(blk.d) * xd[b] * float(dot);
    }
    out[c] = acc;
  }
#endif
}

// Portable decoding of group g into q[32] (the reference of the x86 loaders above).
HWY_INLINE void GroupQuantsScalar(const BlockQ8_0& b, int, int8_t* q) { std::memcpy(q, b.qs, kQK); }
HWY_INLINE void GroupQuantsScalar(const BlockQ4_0& b, int, int8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = int8_t((b.qs[j] & 0x0F) - 8);
    q[j + 16] = int8_t((b.qs[j] >> 4) - 8);
  }
}
HWY_INLINE void GroupQuantsScalar(const BlockI4G& b, int g, int8_t* q) {
  for (int i = 0; i < 16; ++i) {
    q[2 * i] = int8_t((b.qs[16 * g + i] & 0x0F) - 8);
    q[2 * i + 1] = int8_t((b.qs[16 * g + i] >> 4) - 8);
  }
}
HWY_INLINE void GroupQuantsScalar(const BlockQ4_K& b, int g, int8_t* q) {
  const uint8_t* v = b.qs + 32 * (g / 2);
  for (int j = 0; j < 32; ++j) q[j] = int8_t((g & 1) ? (v[j] >> 4) : (v[j] & 0x0F));
}
HWY_INLINE void GroupQuantsScalar(const BlockQ4_1& b, int, int8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = int8_t(b.qs[j] & 0x0F);
    q[j + 16] = int8_t(b.qs[j] >> 4);
  }
}
HWY_INLINE void GroupQuantsScalar(const BlockQ5_1& b, int, int8_t* q) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = int8_t((b.qs[j] & 0x0F) | (((qh >> j) & 1) << 4));
    q[j + 16] = int8_t((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
  }
}
HWY_INLINE void GroupQuantsScalar(const BlockQ5_0& b, int, int8_t* q) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = int8_t(((b.qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16);
    q[j + 16] = int8_t(((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16);
  }
}
HWY_INLINE void GroupQuantsScalar(const BlockQ5_K& b, int g, int8_t* q) {
  const uint8_t* v = b.qs + 32 * (g / 2);
  for (int j = 0; j < 32; ++j)
    q[j] = int8_t(((g & 1) ? (v[j] >> 4) : (v[j] & 0x0F)) | (((b.qh[j] >> g) & 1) << 4));
}
HWY_INLINE void GroupQuantsScalar(const BlockQ6_K& b, int g, int8_t* q) {
  const int h = g / 4, gg = g % 4;
  const uint8_t* l = b.ql + 64 * h + 32 * (gg & 1);
  const uint8_t* qh = b.qh + 32 * h;
  for (int j = 0; j < 32; ++j) {
    const int lo4 = gg >= 2 ? (l[j] >> 4) : (l[j] & 0x0F);
    q[j] = int8_t((lo4 | (((qh[j] >> (2 * gg)) & 3) << 4)) - 32);
  }
}

// ---------------------------------------------------------------------------------------------
// Row kernel: NR output columns of one quantized activation row.
//   xq: [nb * G * 32] int8, xd, xs: [nb * G] (scale, scale · Σq per group),
//   w:  NR rows of nb blocks, row stride w_stride blocks
//   out: [NR] dot products (before bias)
// Not inlined: GEMV and GEMM run this very code, which is what makes them agree bit for bit.

template <int NR, class Block>
HWY_NOINLINE void QuantDotRows(const int8_t* HWY_RESTRICT xq, const float* HWY_RESTRICT xd,
                               const float* HWY_RESTRICT xs, size_t nb, const Block* HWY_RESTRICT w,
                               size_t w_stride, float* HWY_RESTRICT out) {
  constexpr int G = QuantTraits<Block>::kGroups;
  constexpr bool kMins = QuantTraits<Block>::kMins;
  static_assert(NR >= 1 && NR <= 4, "QuantDotRows handles 1..4 columns");
  float m0 = 0.0f, m1 = 0.0f, m2 = 0.0f, m3 = 0.0f;  // minimum terms (Q4_K)
#if ES_QUANT_X86
  // Named accumulators (not an array) so that they live in registers.
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  // The next NR weight rows follow these in memory: fetch them at the pace these are consumed
  // (short rows would otherwise wait for the hardware prefetcher at every group of columns).
  const char* next = reinterpret_cast<const char*>(w + NR * w_stride);
  for (size_t b = 0; b < nb; ++b) {
    if constexpr (NR > 1) {
      for (size_t o = 0; o < NR * sizeof(Block); o += 64) {
        hwy::Prefetch(next + b * NR * sizeof(Block) + o);
      }
    }
#define ES_QUANT_COL(c)                                                                           \
  if constexpr (NR > c) {                                                                         \
    const Block& blk = w[c * w_stride + b];                                                       \
    BlockScalars<Block> bs;                                                                       \
    DecodeScalars(blk, &bs);                                                                      \
    for (int g = 0; g < G; ++g) {                                                                 \
      const size_t xg = b * G + size_t(g);                                                        \
      const __m256i xv = LoadU256(xq + xg * kQK);                                                 \
      const __m256i sc = ScaleVector<Block>(bs.sa[g], bs.sb[g]);                                  \
      a##c = _mm256_fmadd_ps(_mm256_set1_ps(bs.fd * xd[xg]), GroupDotGemv(blk, g, xv, sc), a##c); \
      if constexpr (kMins) m##c = std::fma(bs.fm[g], xs[xg], m##c);                               \
    }                                                                                             \
  }
    ES_QUANT_COL(0)
    ES_QUANT_COL(1)
    ES_QUANT_COL(2)
    ES_QUANT_COL(3)
#undef ES_QUANT_COL
  }
  out[0] = HorizontalSum(a0) - m0;
  if constexpr (NR > 1) out[1] = HorizontalSum(a1) - m1;
  if constexpr (NR > 2) out[2] = HorizontalSum(a2) - m2;
  if constexpr (NR > 3) out[3] = HorizontalSum(a3) - m3;
#else
  float* mins[4] = {&m0, &m1, &m2, &m3};
  for (int c = 0; c < NR; ++c) {
    float acc = 0.0f;
    for (size_t b = 0; b < nb; ++b) {
      const Block& blk = w[c * w_stride + b];
      BlockScalars<Block> bs;
      DecodeScalars(blk, &bs);
      for (int g = 0; g < G; ++g) {
        const size_t xg = b * G + size_t(g);
        int8_t q[kQK];
        GroupQuantsScalar(blk, g, q);
        int32_t lo = 0, hi = 0;
        for (int j = 0; j < 16; ++j) lo += int32_t(q[j]) * int32_t(xq[xg * kQK + j]);
        for (int j = 16; j < 32; ++j) hi += int32_t(q[j]) * int32_t(xq[xg * kQK + j]);
        acc += bs.fd * xd[xg] * float(bs.sa[g] * lo + bs.sb[g] * hi);
        if constexpr (kMins) *mins[c] += bs.fm[g] * xs[xg];
      }
    }
    out[c] = acc - *mins[c];
  }
#endif
}

#if ES_QUANT_X86
// ---------------------------------------------------------------------------------------------
// GEMM over a decoded panel: kQuantCols weight rows decoded once (int8 quants, scales, fd, fm)
// and reused by every activation row of the task. It performs exactly the operations of
// QuantDotRows<kQuantCols> — same vectors, same FMAs, same order — so GEMM rows equal GEMV rows.

template <class Block>
struct QuantPanel {
  static constexpr int G = QuantTraits<Block>::kGroups;
  int8_t* q;     // [cols][groups][32] signed quants
  int16_t* sab;  // [cols][groups][2]  (sA, sB)
  float* fm;     // [cols][groups]     minimums
  float* fd;     // [cols][nb]         block multipliers

  static size_t Floats(size_t groups, size_t nb, size_t cols) {
    // q: 32 bytes (8 floats) per group; sab: 2 int16 (1 float) per group; fm; fd.
    return cols * (groups * kQK / 4 + groups + groups + nb);
  }
  QuantPanel(float* mem, size_t groups, size_t nb, size_t cols) {
    q = reinterpret_cast<int8_t*>(mem);
    sab = reinterpret_cast<int16_t*>(mem + cols * groups * kQK / 4);
    fm = mem + cols * (groups * kQK / 4 + groups);
    fd = fm + cols * groups;
  }
  void Decode(const Block* w, size_t nb, size_t cols) {
    const size_t groups = nb * G;
    for (size_t c = 0; c < cols; ++c) {
      for (size_t b = 0; b < nb; ++b) {
        const Block& blk = w[c * nb + b];
        BlockScalars<Block> bs;
        DecodeScalars(blk, &bs);
        fd[c * nb + b] = bs.fd;
        for (int g = 0; g < G; ++g) {
          const size_t i = c * groups + b * G + size_t(g);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i * kQK), GroupQuants(blk, g));
          sab[2 * i] = bs.sa[g];
          sab[2 * i + 1] = bs.sb[g];
          fm[i] = bs.fm[g];
        }
      }
    }
  }
};

template <class Block>
HWY_NOINLINE void QuantPanelRow(const int8_t* HWY_RESTRICT xq, const float* HWY_RESTRICT xd,
                                const float* HWY_RESTRICT xs, size_t nb, const QuantPanel<Block>& p,
                                float* HWY_RESTRICT out) {
  constexpr int G = QuantTraits<Block>::kGroups;
  constexpr bool kMins = QuantTraits<Block>::kMins;
  const size_t groups = nb * G;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  float m0 = 0.0f, m1 = 0.0f, m2 = 0.0f, m3 = 0.0f;
  for (size_t b = 0; b < nb; ++b) {
    for (int g = 0; g < G; ++g) {
      const size_t xg = b * G + size_t(g);
      const __m256i xv = LoadU256(xq + xg * kQK);
#define ES_PANEL_COL(c)                                                             \
  {                                                                                 \
    const size_t i = c * groups + xg;                                               \
    const __m256i sc = ScaleVector<Block>(p.sab[2 * i], p.sab[2 * i + 1]);          \
    a##c = _mm256_fmadd_ps(_mm256_set1_ps(p.fd[c * nb + b] * xd[xg]),               \
                           GroupDot<Block>(LoadU256(p.q + i * kQK), xv, sc), a##c); \
    if constexpr (kMins) m##c = std::fma(p.fm[i], xs[xg], m##c);                    \
  }
      ES_PANEL_COL(0)
      ES_PANEL_COL(1)
      ES_PANEL_COL(2)
      ES_PANEL_COL(3)
#undef ES_PANEL_COL
    }
  }
  out[0] = HorizontalSum(a0) - m0;
  out[1] = HorizontalSum(a1) - m1;
  out[2] = HorizontalSum(a2) - m2;
  out[3] = HorizontalSum(a3) - m3;
}

#endif  // ES_QUANT_X86

// ---------------------------------------------------------------------------------------------
// Driver: quantize the activation rows (in parallel over rows), then one task per (column block,
// row block); inside a task, columns in groups of kQuantCols and every row of the block against
// each group — on x86 with R > 1 through a panel decoded once per group of columns. epi (or null):
// each task's outputs when it is done.

constexpr size_t kQuantCols = 4;
constexpr size_t kQuantNC = 32;  // columns per task
constexpr size_t kQuantRC = 32;  // rows per task

template <class Block>
void QuantMatMulT(const float* x, size_t R, size_t K, const Block* w, size_t N, const float* bias,
                  float* y, size_t ldy, ThreadPool& pool, const MatMulEpilogue* epi) {
  constexpr bool kWide = std::is_same_v<Block, BlockQ8_0>;  // int16 activations
  const size_t groups = K / kQK;                            // per row
  const size_t nb = groups / QuantTraits<Block>::kGroups;   // weight blocks per row
  // Scratch: R rows of K int8 (int16 when wide) quants — K is a multiple of 32, so this many
  // floats —, R * groups scales, R * groups scaled sums.
  const size_t q_floats = R * K * (kWide ? 2 : 1) / sizeof(float);
  float* buf = ThreadScratch(1).Floats(std::max<size_t>(1, q_floats + 2 * R * groups));
  int8_t* xq = reinterpret_cast<int8_t*>(buf);
  int16_t* xw = reinterpret_cast<int16_t*>(buf);  // the same memory, wide
  float* xd = buf + q_floats;
  float* xs = xd + R * groups;
  pool.ParallelFor(int64_t(R), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const size_t ur = size_t(r);
      if constexpr (kWide) {
        QuantizeActivationRowWide(x + ur * K, int64_t(K), xw + ur * K, xd + ur * groups);
        continue;
      }
      QuantizeActivationRow(x + ur * K, int64_t(K), xq + ur * K, xd + ur * groups,
                            xs + ur * groups);
    }
  });
  // One row against NC (= kQuantCols or 1) columns starting at weight row n.
  auto dot_rows = [&](size_t r, size_t n, size_t nc, float* out) {
    const float* dr = xd + r * groups;
    if constexpr (kWide) {
      if (nc == kQuantCols) {
        WideDotRows<kQuantCols>(xw + r * K, dr, nb, w + n * nb, nb, out);
      } else {
        for (size_t c = 0; c < nc; ++c)
          WideDotRows<1>(xw + r * K, dr, nb, w + (n + c) * nb, nb, out + c);
      }
    } else {
      const int8_t* xr = xq + r * K;
      const float* sr = xs + r * groups;
      if (nc == kQuantCols) {
        QuantDotRows<kQuantCols>(xr, dr, sr, nb, w + n * nb, nb, out);
      } else {
        for (size_t c = 0; c < nc; ++c)
          QuantDotRows<1>(xr, dr, sr, nb, w + (n + c) * nb, nb, out + c);
      }
    }
  };
  const TaskGrid<kQuantRC, kQuantNC> tasks(R, N);
  pool.ParallelFor(int64_t(tasks.Count()), [&](int64_t t0, int64_t t1, int) {
    float out[kQuantCols];
#if ES_QUANT_X86
    float* panel_mem = ThreadScratch(0).Floats(QuantPanel<Block>::Floats(groups, nb, kQuantCols));
#endif
    for (size_t t = size_t(t0); t < size_t(t1); ++t) {
      const auto [r0, r1, n0, n1] = tasks[t];
      for (size_t n = n0; n < n1; n += kQuantCols) {
        const size_t nc = std::min(kQuantCols, n1 - n);
#if ES_QUANT_X86
        if (R > 1 && nc == kQuantCols) {  // decode once, reuse for every row of the block
          QuantPanel<Block> panel(panel_mem, groups, nb, kQuantCols);
          panel.Decode(w + n * nb, nb, kQuantCols);
          static_assert(!kWide, "Q8_0 takes the column-lane kernels on x86");
          for (size_t r = r0; r < r1; ++r) {
            QuantPanelRow(xq + r * K, xd + r * groups, xs + r * groups, nb, panel, out);
            for (size_t c = 0; c < nc; ++c) {
              y[r * ldy + n + c] = out[c] + (bias ? bias[n + c] : 0.0f);
            }
          }
          continue;
        }
#endif
        for (size_t r = r0; r < r1; ++r) {
          dot_rows(r, n, nc, out);
          for (size_t c = 0; c < nc; ++c) {
            y[r * ldy + n + c] = out[c] + (bias ? bias[n + c] : 0.0f);
          }
        }
      }
      if (epi) (*epi)(int64_t(r0), int64_t(r1), int64_t(n0), int64_t(n1));
    }
  });
}

// epi (or null): MatMulEpilogue, in the kernels' regions but on ARM64 (a region of its own).
inline void QuantMatMul(const float* x, int64_t R, int64_t K, const void* w, DType wtype, int64_t N,
                        const float* bias, float* y, int64_t ldy, ThreadPool& pool,
                        const MatMulEpilogue* epi = nullptr) {
  const size_t r = size_t(R), k = size_t(K), n = size_t(N), l = size_t(ldy);
#if HWY_ARCH_ARM_A64
  // ARM64, every Highway target: the NEON / dotprod / i8mm kernels (matmul_quant_arm.cpp).
  if (ArmQuantMatMulSupports(wtype)) {
    ArmQuantMatMul(ArmQuantPathActive(), x, R, K, w, wtype, N, bias, y, ldy, pool);
    if (epi) EpilogueRegion(r, n, *epi, pool);
    return;
  }
#endif
  const bool known = DispatchBlockType(wtype, [&](auto tag) {
    using Block = typename decltype(tag)::type;
    const Block* wb = static_cast<const Block*>(w);
#if ES_QUANT_X86
    // Q8_0, Q4_0, Q4_K, Q5_K and Q6_K: the column-lane kernels (matmul_lanes-inl.h,
    // matmul_lanes_k-inl.h).
    if constexpr (std::is_same_v<Block, BlockQ8_0>) {
      return LaneMatMul<Q80Kernel>(x, r, k, wb, n, bias, y, l, pool, epi);
    } else if constexpr (std::is_same_v<Block, BlockQ4_0>) {
      return LaneMatMul<Q40Kernel>(x, r, k, wb, n, bias, y, l, pool, epi);
    } else if constexpr (std::is_same_v<Block, BlockQ4_K>) {
      return LaneMatMul<Q4KKernel>(x, r, k, wb, n, bias, y, l, pool, epi);
    } else if constexpr (std::is_same_v<Block, BlockQ5_K>) {
      return LaneMatMul<Q5KKernel>(x, r, k, wb, n, bias, y, l, pool, epi);
    } else if constexpr (std::is_same_v<Block, BlockQ6_K>) {
      return LaneMatMul<Q6KKernel>(x, r, k, wb, n, bias, y, l, pool, epi);
    } else {
      return QuantMatMulT(x, r, k, wb, n, bias, y, l, pool, epi);
    }
#else
    return QuantMatMulT(x, r, k, wb, n, bias, y, l, pool, epi);
#endif
  });
  if (!known) Fail("MatMul: weight type ", Name(wtype), " is not supported by the CPU kernels");
}

// ya = x · Waᵀ, yb = x · Wbᵀ (matmul.h MatMulPair). The x86 column-lane types quantize x once
// for both and run them in the same regions (epi, or null, in them); the others (and ARM64) run
// QuantMatMul twice, then epi as a region of its own. Either way each output has the bits
// QuantMatMul gives it.
inline void QuantMatMulPair(const float* x, int64_t R, int64_t K, const void* wa, const void* wb,
                            DType wtype, int64_t N, float* ya, float* yb, int64_t ldy,
                            ThreadPool& pool, const MatMulEpilogue* epi = nullptr) {
#if ES_QUANT_X86
  const size_t r = size_t(R), k = size_t(K), n = size_t(N), l = size_t(ldy);
  bool done = false;
  DispatchBlockType(wtype, [&](auto tag) {
    using Block = typename decltype(tag)::type;
    const Block *a = static_cast<const Block*>(wa), *b = static_cast<const Block*>(wb);
    done = true;
    if constexpr (std::is_same_v<Block, BlockQ8_0>) {
      LaneMatMulPair<Q80Kernel>(x, r, k, a, b, n, ya, yb, l, pool, epi);
    } else if constexpr (std::is_same_v<Block, BlockQ4_0>) {
      LaneMatMulPair<Q40Kernel>(x, r, k, a, b, n, ya, yb, l, pool, epi);
    } else if constexpr (std::is_same_v<Block, BlockQ4_K>) {
      LaneMatMulPair<Q4KKernel>(x, r, k, a, b, n, ya, yb, l, pool, epi);
    } else if constexpr (std::is_same_v<Block, BlockQ5_K>) {
      LaneMatMulPair<Q5KKernel>(x, r, k, a, b, n, ya, yb, l, pool, epi);
    } else if constexpr (std::is_same_v<Block, BlockQ6_K>) {
      LaneMatMulPair<Q6KKernel>(x, r, k, a, b, n, ya, yb, l, pool, epi);
    } else {
      done = false;
    }
  });
  if (done) return;
#endif
  QuantMatMul(x, R, K, wa, wtype, N, nullptr, ya, ldy, pool);
  QuantMatMul(x, R, K, wb, wtype, N, nullptr, yb, ldy, pool);
  if (epi) EpilogueRegion(size_t(R), size_t(N), *epi, pool);
}

}  // namespace HWY_NAMESPACE
}  // namespace es::cpu
HWY_AFTER_NAMESPACE();

#endif  // ES_CPU_KERNELS_MATMUL_QUANT_INL_H_ toggle
#endif  // ES_CPU_QUANT_ACTIVATIONS_ONLY
