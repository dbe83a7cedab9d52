// ARM64 integer paths of the block-quantized CPU matmul: plain NEON, dotprod (SDOT) and i8mm
// (SMMLA), one binary for every ARMv8 CPU (matmul_quant_arm.h says how a path is chosen).
//
// Activations are quantized per row exactly as on x86 (matmul_quant-inl.h): per group of 32 to
// int8 with an f32 scale dx (and dx·Σq for the types with minimums); Q8_0 weights take int16
// activations, stored here as two int8 planes per group, x = 256·xh + xl (xh = (x + 128) >> 8 in
// [-127, 127], xl in [-128, 127]), so that the int8 dot instructions serve them too.
//
// Weights keep llama.cpp's block layouts (no repacking); each block is G groups of 32 decoded in
// registers to two int8x16 (elements 0..15, 16..31), int scales sA, sB, a float multiplier fd
// and a float minimum fm (matmul_quant-inl.h's table).
//
// Reduction order — the contract that makes the three paths, GEMV and GEMM agree bit for bit.
// For output (r, n):
//   isum_g = sA · Σ_{j<16} q_j x_j + sB · Σ_{j>=16} q_j x_j      (exact int32, any grouping)
//   acc = +0, mins = +0;  for each group g of the row in order:
//     acc  = fma(fd_b · dx_g, float(isum_g), acc)
//     mins = fma(fm_g, dx_g·Σx_g, mins)                            (types with minimums)
//   y = (acc − mins) + (bias ? bias[n] : 0)
// The paths differ only in how isum_g is formed (vmull_s8 + vpadal, vdotq_s32, vmmlaq_s32) and
// in how many outputs share a vector (4 columns in the lanes of the GEMV, 2×2 in an SMMLA
// result); every lane does the same IEEE operations on the same values. The code reads each
// block's fd, sA, sB, fm with the same scalar decode everywhere.
//
// Build: the kernels of each path come from matmul_quant_arm-inl.h, compiled three times under
// `#pragma GCC target` (armv8-a, armv8.2-a+dotprod, armv8.2-a+dotprod+i8mm); only those kernels
// (internal linkage, no library templates) get the wider ISA, so nothing shared with the rest of
// the binary can pick up an instruction an older CPU lacks. The driver below is plain ARMv8.

#include "cpu/kernels/matmul_quant_arm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(__aarch64__)
#include <arm_neon.h>
#include <sys/auxv.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "cpu/kernels/block_dispatch.h"
#include "cpu/kernels/kquant_scales.h"
#include "cpu/kernels/scratch.h"
#include "cpu/kernels/task_grid.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/quant/blocks.h"
#define ES_CPU_QUANT_ACTIVATIONS_ONLY 1
#include "cpu/kernels/matmul_quant-inl.h"  // QuantizeActivationRow(Wide), shared with x86
#undef ES_CPU_QUANT_ACTIVATIONS_ONLY

#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1UL << 13)
#endif
#endif  // __aarch64__

namespace es::cpu {

#if !defined(__aarch64__)

ArmQuantPath ArmQuantPathBest() { return ArmQuantPath::kNone; }
ArmQuantPath ArmQuantPathActive() { return ArmQuantPath::kNone; }
bool ArmQuantMatMulSupports(DType) { return false; }
void ArmQuantMatMul(ArmQuantPath, const float*, int64_t, int64_t, const void*, DType, int64_t,
                    const float*, float*, int64_t, ThreadPool&) {
  std::abort();  // only reachable from aarch64 code
}

#else  // __aarch64__

namespace {

#define ES_ARM_INLINE inline __attribute__((always_inline))
#define ES_ARM_NOINLINE __attribute__((noinline))

// ---------------------------------------------------------------------------------------------
// Per-type traits: groups of 32 per block; minimums; how the group's int scales apply (one per
// half: Q6_K; one per group: Q4_K, Q5_K; none); int16 activations (Q8_0, as two int8 planes).

template <int Groups, bool Mins, bool HalfScales, bool GroupScale, bool Wide>
struct ArmTraitsOf {
  static constexpr int kGroups = Groups;
  static constexpr bool kMins = Mins;
  static constexpr bool kHalfScales = HalfScales;
  static constexpr bool kGroupScale = GroupScale;
  static constexpr bool kWide = Wide;
  static constexpr size_t kActBytes = Wide ? 2 * kQK : kQK;  // activation bytes per group
};
template <class Block>
struct ArmTraits;
template <>
struct ArmTraits<BlockQ8_0> : ArmTraitsOf<1, false, false, false, true> {};
template <>
struct ArmTraits<BlockQ4_0> : ArmTraitsOf<1, false, false, false, false> {};
template <>
struct ArmTraits<BlockQ4_1> : ArmTraitsOf<1, true, false, false, false> {};
template <>
struct ArmTraits<BlockQ5_0> : ArmTraitsOf<1, false, false, false, false> {};
template <>
struct ArmTraits<BlockQ5_1> : ArmTraitsOf<1, true, false, false, false> {};
template <>
struct ArmTraits<BlockI4G> : ArmTraitsOf<kQKI4G / kQK, false, false, false, false> {};
template <>
struct ArmTraits<BlockQ4_K> : ArmTraitsOf<kQKK / kQK, true, false, true, false> {};
template <>
struct ArmTraits<BlockQ5_K> : ArmTraitsOf<kQKK / kQK, true, false, true, false> {};
template <>
struct ArmTraits<BlockQ6_K> : ArmTraitsOf<kQKK / kQK, false, true, false, false> {};

// One quantized activation row: q [groups][kActBytes] int8, d [groups] scales, s [groups] =
// d · Σq (types with minimums).
struct ActRow {
  const int8_t* q;
  const float* d;
  const float* s;
};

// ---------------------------------------------------------------------------------------------
// Block decoding (baseline NEON and scalar code, inlined into every path's kernels).

ES_ARM_INLINE float Half(uint16_t h) {
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

template <class Block>
struct Scalars {
  static constexpr int G = ArmTraits<Block>::kGroups;
  float fd;
  int32_t sa[G], sb[G];
  float fm[G];
};

template <class Block>
ES_ARM_INLINE void PlainScalars(const Block& b, Scalars<Block>* s) {
  s->fd = Half(b.d);
  for (int g = 0; g < Scalars<Block>::G; ++g) {
    s->sa[g] = s->sb[g] = 1;
    s->fm[g] = 0.0f;
  }
}
ES_ARM_INLINE void DecodeScalars(const BlockQ8_0& b, Scalars<BlockQ8_0>* s) { PlainScalars(b, s); }
ES_ARM_INLINE void DecodeScalars(const BlockQ4_0& b, Scalars<BlockQ4_0>* s) { PlainScalars(b, s); }
ES_ARM_INLINE void DecodeScalars(const BlockQ5_0& b, Scalars<BlockQ5_0>* s) { PlainScalars(b, s); }
ES_ARM_INLINE void DecodeScalars(const BlockI4G& b, Scalars<BlockI4G>* s) { PlainScalars(b, s); }
ES_ARM_INLINE void DecodeScalars(const BlockQ4_1& b, Scalars<BlockQ4_1>* s) {
  PlainScalars(b, s);
  s->fm[0] = -Half(b.m);  // x = d·q + m
}
ES_ARM_INLINE void DecodeScalars(const BlockQ5_1& b, Scalars<BlockQ5_1>* s) {
  PlainScalars(b, s);
  s->fm[0] = -Half(b.m);
}
// Q4_K and Q5_K: 6-bit scales and mins (kquant_scales.h, shared with x86).
template <class BlockK>
ES_ARM_INLINE void DecodeScalarsK(const BlockK& b, Scalars<BlockK>* s) {
  s->fd = Half(b.d);
  const float dmin = Half(b.dmin);
  UnpackScalesMinsK(b.scales, dmin, s);
}
ES_ARM_INLINE void DecodeScalars(const BlockQ4_K& b, Scalars<BlockQ4_K>* s) {
  DecodeScalarsK(b, s);
}
ES_ARM_INLINE void DecodeScalars(const BlockQ5_K& b, Scalars<BlockQ5_K>* s) {
  DecodeScalarsK(b, s);
}
ES_ARM_INLINE void DecodeScalars(const BlockQ6_K& b, Scalars<BlockQ6_K>* s) {
  s->fd = Half(b.d);
  for (int g = 0; g < 8; ++g) {  // group g's halves use scales[2g], scales[2g + 1]
    s->sa[g] = b.scales[2 * g];
    s->sb[g] = b.scales[2 * g + 1];
    s->fm[g] = 0.0f;
  }
}

// The 32 quants of group g as signed int8: lo = elements 0..15, hi = 16..31.
struct GroupQ {
  int8x16_t lo, hi;
};

ES_ARM_INLINE int8x16_t S8(uint8x16_t v) { return vreinterpretq_s8_u8(v); }
ES_ARM_INLINE uint8x16_t Low4(uint8x16_t v) { return vandq_u8(v, vdupq_n_u8(0x0F)); }

ES_ARM_INLINE GroupQ GroupQuants(const BlockQ8_0& b, int) {
  return {vld1q_s8(b.qs), vld1q_s8(b.qs + 16)};
}
// Q4_0: element j in the low nibble of qs[j], j + 16 in the high one; minus 8.
ES_ARM_INLINE GroupQ GroupQuants(const BlockQ4_0& b, int) {
  const uint8x16_t v = vld1q_u8(b.qs);
  const int8x16_t eight = vdupq_n_s8(8);
  return {vsubq_s8(S8(Low4(v)), eight), vsubq_s8(S8(vshrq_n_u8(v, 4)), eight)};
}
ES_ARM_INLINE GroupQ GroupQuants(const BlockQ4_1& b, int) {
  const uint8x16_t v = vld1q_u8(b.qs);
  return {S8(Low4(v)), S8(vshrq_n_u8(v, 4))};
}
// 0x10 in byte j where bit j of the 32-bit qh is set: lo for bits 0..15, hi for 16..31.
ES_ARM_INLINE void FifthBits(const uint8_t* qh, uint8x16_t* lo, uint8x16_t* hi) {
  static const uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t bit = vld1q_u8(kBit), ten = vdupq_n_u8(0x10);
  *lo = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1])), bit), ten);
  *hi = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3])), bit), ten);
}
ES_ARM_INLINE GroupQ GroupQuants(const BlockQ5_1& b, int) {
  const uint8x16_t v = vld1q_u8(b.qs);
  uint8x16_t flo, fhi;
  FifthBits(b.qh, &flo, &fhi);
  return {S8(vorrq_u8(Low4(v), flo)), S8(vorrq_u8(vshrq_n_u8(v, 4), fhi))};
}
ES_ARM_INLINE GroupQ GroupQuants(const BlockQ5_0& b, int) {
  const uint8x16_t v = vld1q_u8(b.qs);
  uint8x16_t flo, fhi;
  FifthBits(b.qh, &flo, &fhi);
  const int8x16_t sixteen = vdupq_n_s8(16);
  return {vsubq_s8(S8(vorrq_u8(Low4(v), flo)), sixteen),
          vsubq_s8(S8(vorrq_u8(vshrq_n_u8(v, 4), fhi)), sixteen)};
}
// I4G: element 2i in the low nibble of byte i of the group's 16 bytes, 2i + 1 in the high one.
ES_ARM_INLINE GroupQ GroupQuants(const BlockI4G& b, int g) {
  const uint8x16_t v = vld1q_u8(b.qs + 16 * g);
  const uint8x16_t lo = Low4(v), hi = vshrq_n_u8(v, 4);
  const int8x16_t eight = vdupq_n_s8(8);
  return {vsubq_s8(S8(vzip1q_u8(lo, hi)), eight), vsubq_s8(S8(vzip2q_u8(lo, hi)), eight)};
}
// Q4_K: 64-chunk c = g/2 holds group 2c in the low nibbles of qs[32c..], 2c+1 in the high ones.
ES_ARM_INLINE GroupQ GroupQuants(const BlockQ4_K& b, int g) {
  const uint8x16_t v0 = vld1q_u8(b.qs + 32 * (g / 2)), v1 = vld1q_u8(b.qs + 32 * (g / 2) + 16);
  if (g & 1) return {S8(vshrq_n_u8(v0, 4)), S8(vshrq_n_u8(v1, 4))};
  return {S8(Low4(v0)), S8(Low4(v1))};
}
// Q5_K: Q4_K's nibbles | bit g of qh[j] as bit 4.
ES_ARM_INLINE GroupQ GroupQuants(const BlockQ5_K& b, int g) {
  const uint8x16_t v0 = vld1q_u8(b.qs + 32 * (g / 2)), v1 = vld1q_u8(b.qs + 32 * (g / 2) + 16);
  const uint8x16_t n0 = (g & 1) ? vshrq_n_u8(v0, 4) : Low4(v0);
  const uint8x16_t n1 = (g & 1) ? vshrq_n_u8(v1, 4) : Low4(v1);
  const uint8x16_t bit = vdupq_n_u8(uint8_t(1u << g)), ten = vdupq_n_u8(0x10);
  const uint8x16_t h0 = vandq_u8(vtstq_u8(vld1q_u8(b.qh), bit), ten);
  const uint8x16_t h1 = vandq_u8(vtstq_u8(vld1q_u8(b.qh + 16), bit), ten);
  return {S8(vorrq_u8(n0, h0)), S8(vorrq_u8(n1, h1))};
}
// Q6_K: group 4h + gg: 4 low bits from ql[64h + 32(gg & 1) ..] (low nibble for gg < 2, high for
// gg >= 2), 2 high bits from qh[32h ..] at bit 2gg; minus 32.
ES_ARM_INLINE GroupQ GroupQuants(const BlockQ6_K& b, int g) {
  const int h = g / 4, gg = g % 4;
  const uint8_t* l = b.ql + 64 * h + 32 * (gg & 1);
  const uint8_t* qh = b.qh + 32 * h;
  const uint8x16_t l0 = vld1q_u8(l), l1 = vld1q_u8(l + 16);
  const uint8x16_t n0 = gg >= 2 ? vshrq_n_u8(l0, 4) : Low4(l0);
  const uint8x16_t n1 = gg >= 2 ? vshrq_n_u8(l1, 4) : Low4(l1);
  const int8x16_t shift = vdupq_n_s8(int8_t(-2 * gg));  // right shift by 2gg
  const uint8x16_t three = vdupq_n_u8(3);
  const uint8x16_t h0 = vshlq_n_u8(vandq_u8(vshlq_u8(vld1q_u8(qh), shift), three), 4);
  const uint8x16_t h1 = vshlq_n_u8(vandq_u8(vshlq_u8(vld1q_u8(qh + 16), shift), three), 4);
  const int8x16_t k32 = vdupq_n_s8(32);
  return {vsubq_s8(S8(vorrq_u8(n0, h0)), k32), vsubq_s8(S8(vorrq_u8(n1, h1)), k32)};
}

// The kernels of one path (matmul_quant_arm-inl.h): one row × 4 columns, one row × 1 column,
// 4 rows × 4 columns (SMMLA on the i8mm path, the 4-column kernel over 4 rows otherwise).
template <class Block>
struct ArmKernels {
  void (*dot4)(const ActRow*, size_t, const Block*, size_t, float*) = nullptr;
  void (*dot1)(const ActRow&, size_t, const Block*, size_t, float*) = nullptr;
  void (*tile4x4)(const ActRow*, size_t, const Block*, size_t, float*) = nullptr;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// The three paths.

namespace arm_neon {
namespace {
#define ES_ARM_DOT 0
#define ES_ARM_MMLA 0
#include "cpu/kernels/matmul_quant_arm-inl.h"
#undef ES_ARM_DOT
#undef ES_ARM_MMLA
}  // namespace
}  // namespace arm_neon

#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
namespace arm_dotprod {
namespace {
#define ES_ARM_DOT 1
#define ES_ARM_MMLA 0
#include "cpu/kernels/matmul_quant_arm-inl.h"
#undef ES_ARM_DOT
#undef ES_ARM_MMLA
}  // namespace
}  // namespace arm_dotprod
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod+i8mm")
namespace arm_i8mm {
namespace {
#define ES_ARM_DOT 1
#define ES_ARM_MMLA 1
#include "cpu/kernels/matmul_quant_arm-inl.h"
#undef ES_ARM_DOT
#undef ES_ARM_MMLA
}  // namespace
}  // namespace arm_i8mm
#pragma GCC pop_options

// ---------------------------------------------------------------------------------------------
// Path selection.

ArmQuantPath ArmQuantPathBest() {
  static const ArmQuantPath best = [] {
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    if (!(hw & HWCAP_ASIMDDP)) return ArmQuantPath::kNeon;
    return (hw2 & HWCAP2_I8MM) ? ArmQuantPath::kI8mm : ArmQuantPath::kDotprod;
  }();
  return best;
}

ArmQuantPath ArmQuantPathActive() {
  static const ArmQuantPath active = [] {
    const ArmQuantPath best = ArmQuantPathBest();
    const char* env = std::getenv("ES_CPU_ARM_PATH");
    if (!env || !*env) return best;
    const std::string v = env;
    ArmQuantPath want = best;
    if (v == "neon") {
      want = ArmQuantPath::kNeon;
    } else if (v == "dotprod") {
      want = ArmQuantPath::kDotprod;
    } else if (v == "i8mm") {
      want = ArmQuantPath::kI8mm;
    } else {
      std::fprintf(stderr, "edgeseek: ES_CPU_ARM_PATH=%s is not neon, dotprod or i8mm; using %s\n",
                   env, ArmQuantPathName(best));
    }
    return std::min(want, best);
  }();
  return active;
}

bool ArmQuantMatMulSupports(DType t) {
  return DispatchBlockType(t, [](auto) {});
}

// ---------------------------------------------------------------------------------------------
// Driver: quantize the activation rows (in parallel over rows), then one task per (column block,
// row block); inside a task, 4 columns at a time against tiles of 4 rows (SMMLA on the i8mm
// path, each weight group decoded once for the 4 rows otherwise), leftover rows one at a time;
// the last N % 4 columns one at a time.

namespace {

constexpr size_t kCols = 4;
constexpr size_t kTaskCols = 32;
constexpr size_t kTaskRows = 32;  // a multiple of the 4-row tile

// Q8_0's int16 activations of one group (64 bytes) rewritten in place as 32 high bytes, then
// 32 low bytes: x = 256·xh + xl.
void SplitWideGroup(int8_t* g) {
  int16_t v[kQK];
  std::memcpy(v, g, sizeof(v));
  for (int j = 0; j < kQK; ++j) {
    const int h = (int(v[j]) + 128) >> 8;  // |x| <= 32512: h in [-127, 127]
    g[j] = int8_t(h);
    g[kQK + j] = int8_t(int(v[j]) - 256 * h);  // in [-128, 127]
  }
}

template <class Block>
void Run(const ArmKernels<Block>& k, const float* x, size_t R, size_t K, const Block* w, size_t N,
         const float* bias, float* y, size_t ldy, ThreadPool& pool) {
  using T = ArmTraits<Block>;
  const size_t groups = K / kQK;
  const size_t nb = groups / T::kGroups;
  const size_t q_floats = R * groups * T::kActBytes / sizeof(float);
  float* buf = ThreadScratch(1).Floats(std::max<size_t>(1, q_floats + 2 * R * groups));
  int8_t* xq = reinterpret_cast<int8_t*>(buf);
  float* xd = buf + q_floats;
  float* xs = xd + R * groups;
  const size_t row_bytes = groups * T::kActBytes;
  pool.ParallelFor(int64_t(R), [&](int64_t r0, int64_t r1, int) {
    for (size_t r = size_t(r0); r < size_t(r1); ++r) {
      int8_t* qr = xq + r * row_bytes;
      if constexpr (T::kWide) {
        QuantizeActivationRowWide(x + r * K, int64_t(K), reinterpret_cast<int16_t*>(qr),
                                  xd + r * groups);
        for (size_t g = 0; g < groups; ++g) SplitWideGroup(qr + g * T::kActBytes);
      } else {
        QuantizeActivationRow(x + r * K, int64_t(K), qr, xd + r * groups, xs + r * groups);
      }
    }
  });
  auto act = [&](size_t r) { return ActRow{xq + r * row_bytes, xd + r * groups, xs + r * groups}; };
  auto store = [&](size_t r, size_t n, const float* out, size_t nc) {
    for (size_t c = 0; c < nc; ++c) y[r * ldy + n + c] = out[c] + (bias ? bias[n + c] : 0.0f);
  };
  const TaskGrid<kTaskRows, kTaskCols> tasks(R, N);
  pool.ParallelFor(int64_t(tasks.Count()), [&](int64_t t0, int64_t t1, int) {
    for (size_t t = size_t(t0); t < size_t(t1); ++t) {
      const auto [r0, r1, n0, n1] = tasks[t];
      for (size_t n = n0; n < n1; n += kCols) {
        const size_t nc = std::min(kCols, n1 - n);
        const Block* wn = w + n * nb;
        size_t r = r0;
        if (nc == kCols) {
          for (; r + 4 <= r1; r += 4) {
            const ActRow rows[4] = {act(r), act(r + 1), act(r + 2), act(r + 3)};
            float out[4 * kCols];
            k.tile4x4(rows, nb, wn, nb, out);
            for (size_t i = 0; i < 4; ++i) store(r + i, n, out + i * kCols, kCols);
          }
        }
        for (; r < r1; ++r) {
          float out[kCols];
          const ActRow a = act(r);
          if (nc == kCols) {
            k.dot4(&a, nb, wn, nb, out);
          } else {
            for (size_t c = 0; c < nc; ++c) k.dot1(a, nb, wn + c * nb, nb, out + c);
          }
          store(r, n, out, nc);
        }
      }
    }
  });
}

template <class Block>
void RunPath(ArmQuantPath path, const float* x, size_t R, size_t K, const void* w, size_t N,
             const float* bias, float* y, size_t ldy, ThreadPool& pool) {
  ES_CHECK(path != ArmQuantPath::kNone && path <= ArmQuantPathBest(), "MatMul: ARM path ",
           ArmQuantPathName(path),
           " is not supported by this CPU (best: ", ArmQuantPathName(ArmQuantPathBest()), ")");
  const Block* wb = static_cast<const Block*>(w);
  switch (path) {
    case ArmQuantPath::kI8mm:
      return Run(arm_i8mm::KernelsFor<Block>(), x, R, K, wb, N, bias, y, ldy, pool);
    case ArmQuantPath::kDotprod:
      return Run(arm_dotprod::KernelsFor<Block>(), x, R, K, wb, N, bias, y, ldy, pool);
    default:
      return Run(arm_neon::KernelsFor<Block>(), x, R, K, wb, N, bias, y, ldy, pool);
  }
}

}  // namespace

void ArmQuantMatMul(ArmQuantPath path, const float* x, int64_t R, int64_t K, const void* w,
                    DType wtype, int64_t N, const float* bias, float* y, int64_t ldy,
                    ThreadPool& pool) {
  const size_t r = size_t(R), k = size_t(K), n = size_t(N), l = size_t(ldy);
  const bool known = DispatchBlockType(wtype, [&](auto tag) {
    RunPath<typename decltype(tag)::type>(path, x, r, k, w, n, bias, y, l, pool);
  });
  if (!known) Fail("MatMul: weight type ", Name(wtype), " has no ARM kernel");
}

#endif  // __aarch64__

const char* ArmQuantPathName(ArmQuantPath path) {
  switch (path) {
    case ArmQuantPath::kNeon:
      return "NEON";
    case ArmQuantPath::kDotprod:
      return "NEON+dotprod";
    case ArmQuantPath::kI8mm:
      return "NEON+dotprod+i8mm";
    default:
      return "none";
  }
}

}  // namespace es::cpu
