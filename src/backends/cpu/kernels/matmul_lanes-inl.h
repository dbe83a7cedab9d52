// Column-lane kernels for Q4_0 and Q8_0 weights on x86 (AVX2 and up): the GEMV (decode, R = 1)
// and GEMM (prefill, R > 1) of these two types, included by matmul_quant-inl.h once per Highway
// target. 8 weight columns side by side, one column per f32 lane, so a block's integer dot of
// every column lands in its own lane and the float part is one multiply and one FMA per block for
// 8 outputs at once.
//
// Reduction order (batch invariance): output (r, n) is
//   acc = +0;  for b = 0 … K/32 − 1 in order:  acc = fma(d_w[n, b] · d_x[r, b], float(isum), acc)
//   y = acc + bias[n]
// where isum is the exact int32 dot of block b. The GEMV interleaves (or reduces) in registers
// from the raw rows, the GEMM interleaves 8 columns once per task into a panel that register tiles
// of up to 4 activation rows read (Q4_0 on AVX3_DL: 16 columns in a zmm, tiles of up to 8 rows,
// Q40SkinnyWide and LaneWideGemm below); the integer parts are exact and the float operations are
// the same, so R, the tile shape, the thread count and the other rows never change a bit of y.
//
// Q4_0 (int8 activations, dx = absmax/127): block b of 8 columns is interleaved into four 32-byte
// vectors q[j] (j = 0..3) whose byte 4c + i is byte 4j + i of column c's qs — low nibble =
// element 4j + i, high nibble = element 16 + 4j + i. So
//   Σ_k nib_c,k · x_k = Σ_j maddubs(q[j] & 0xF, bcast4(x[4j..]))
//                     + Σ_j maddubs(q[j] >> 4,  bcast4(x[16+4j..]))
// with the unsigned nibbles (0..15) straight into maddubs against the signed int8 activations;
// eight int16 products of at most 2 · 15 · 127 add up to at most 30480 < 32767, so the int16 sums
// are exact; one madd with ones makes lane c's int32 dot, and the Q4_0 offset comes out as
//   isum_c = Σ nib_c,k x_k + (−8 · Σ_k x_k)   (−8 · Σx precomputed once per activation block).
//
// Q8_0 (int16 activations, dx = absmax/32512, see matmul_quant-inl.h): the GEMM panel holds 8
// columns' quants interleaved in pairs — q[j] = [(k 4j, 4j+1) of columns 0..7 | (k 4j+2, 4j+3) of
// columns 0..7] — so that a sign-extended half times a broadcast activation pair through madd is
// lane c's two products; 16 madds a block, int32 sums (|isum| <= 32 · 128 · 32512 < 2^31). The
// GEMV reads each column's 32 quants as they are (2 madds against the activation block) and
// reduces the 8 columns' 8 int32 lanes to one lane each with a transpose-and-add tree.
//
// Repacked weights (repack.h, made once at load): each group of 8 columns is stored as the GEMM
// panel would hold it, [nb] blocks of interleaved quants (Q4_0 128 bytes, Q8_0 256 bytes) and then
// [nb] × 8 f16 scales (16 bytes), so the same size as the raw rows; a last partial group is padded
// with zero columns. GEMV and GEMM then read one contiguous stream per group through the panel
// row kernels below (RT = 1 for the GEMV), the same integer parts and float operations again.

#if defined(ES_CPU_KERNELS_MATMUL_LANES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ES_CPU_KERNELS_MATMUL_LANES_INL_H_
#undef ES_CPU_KERNELS_MATMUL_LANES_INL_H_
#else
#define ES_CPU_KERNELS_MATMUL_LANES_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "cpu/kernels/matmul.h"
#include "cpu/kernels/scratch.h"
#include "cpu/kernels/task_grid.h"
#include "edgeseek/internal/core/thread_pool.h"
#include "edgeseek/internal/quant/blocks.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#include <immintrin.h>

HWY_BEFORE_NAMESPACE();
namespace es::cpu {
namespace HWY_NAMESPACE {

constexpr size_t kLaneCols = 8;  // weight columns per interleaved group (one per f32 lane)

// Quantized activation rows, as the kernels read them.
struct LaneActs {
  const void* q;      // [R, K] int8 (Q4_0) or int16 (Q8_0) quants
  const float* d;     // [R, nb] scales
  const int32_t* s8;  // [R, nb] Q4_0: −8 · Σ quants of the block (the nibbles' offset)
  const float* s;     // [R, nb] scale · Σ quants of the block (Q4_K's minimums)
  size_t K, nb;       // nb: blocks of 32 activations per row
  const int8_t* q8() const { return static_cast<const int8_t*>(q); }
  const int16_t* q16() const { return static_cast<const int16_t*>(q); }
};

// y[0..nc) of one row (lanes of acc) plus bias.
HWY_INLINE void LaneStore(__m256 acc, const float* bias, size_t nc, float* y) {
  alignas(32) float out[kLaneCols];
  _mm256_store_ps(out, acc);
  for (size_t c = 0; c < nc; ++c) y[c] = out[c] + (bias ? bias[c] : 0.0f);
}

// The f16 scales of block b of the 8 rows w + c · stride, as f32 lanes.
template <class Block>
HWY_INLINE __m256 LaneScales(const Block* HWY_RESTRICT p, size_t stride) {
  return _mm256_cvtph_ps(_mm_setr_epi16(short(p[0].d), short(p[stride].d), short(p[2 * stride].d),
                                        short(p[3 * stride].d), short(p[4 * stride].d),
                                        short(p[5 * stride].d), short(p[6 * stride].d),
                                        short(p[7 * stride].d)));
}

// The rows after these 8 (contiguous: 8 · row_bytes) are fetched at the pace these are consumed,
// `bytes` a block, so that a group never starts by waiting for 8 new streams (short rows).
HWY_INLINE void PrefetchNextGroup(const void* w, size_t row_bytes, size_t b, size_t bytes) {
  const char* next = static_cast<const char*>(w) + kLaneCols * row_bytes + b * bytes;
  for (size_t o = 0; o < bytes + 63; o += 64) hwy::Prefetch(next + o);
}

// One block of 8 interleaved columns, as the GEMM panel stores it (160 bytes).
struct Q40x8 {
  __m256i q[4];  // q[j] byte 4c + i = qs[4j + i] of column c
  __m256 d;      // d of column c, as f32
};

// Block b of the 8 rows w + c · stride (c = 0..7) interleaved into registers.
HWY_INLINE void InterleaveQ40(const BlockQ4_0* HWY_RESTRICT w, size_t stride, size_t b,
                              Q40x8* HWY_RESTRICT out) {
  const BlockQ4_0* p = w + b;
  auto load = [&](size_t c) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[c * stride].qs));
  };
  // Rows c and c + 4 in the two 128-bit halves, then a 4×4 transpose of dwords in each half.
  const __m256i a0 = _mm256_inserti128_si256(_mm256_castsi128_si256(load(0)), load(4), 1);
  const __m256i a1 = _mm256_inserti128_si256(_mm256_castsi128_si256(load(1)), load(5), 1);
  const __m256i a2 = _mm256_inserti128_si256(_mm256_castsi128_si256(load(2)), load(6), 1);
  const __m256i a3 = _mm256_inserti128_si256(_mm256_castsi128_si256(load(3)), load(7), 1);
  const __m256i t0 = _mm256_unpacklo_epi32(a0, a1), t1 = _mm256_unpackhi_epi32(a0, a1);
  const __m256i t2 = _mm256_unpacklo_epi32(a2, a3), t3 = _mm256_unpackhi_epi32(a2, a3);
  out->q[0] = _mm256_unpacklo_epi64(t0, t2);
  out->q[1] = _mm256_unpackhi_epi64(t0, t2);
  out->q[2] = _mm256_unpacklo_epi64(t1, t3);
  out->q[3] = _mm256_unpackhi_epi64(t1, t3);
  out->d = LaneScales(p, stride);
}

HWY_INLINE __m256i Bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// The nibbles of one interleaved block, unpacked once and used by every row of a tile.
struct Q40Nibbles {
  __m256i lo0, lo1, lo2, lo3;  // elements 4j .. 4j + 3 of each column (j = 0..3)
  __m256i hi0, hi1, hi2, hi3;  // elements 16 + 4j ..
  __m256 d;
};

HWY_INLINE void UnpackQ40(__m256i q0, __m256i q1, __m256i q2, __m256i q3, __m256 d, Q40Nibbles* n) {
  const __m256i m = _mm256_set1_epi8(0x0F);
  n->lo0 = _mm256_and_si256(q0, m);
  n->lo1 = _mm256_and_si256(q1, m);
  n->lo2 = _mm256_and_si256(q2, m);
  n->lo3 = _mm256_and_si256(q3, m);
  n->hi0 = _mm256_and_si256(_mm256_srli_epi16(q0, 4), m);
  n->hi1 = _mm256_and_si256(_mm256_srli_epi16(q1, 4), m);
  n->hi2 = _mm256_and_si256(_mm256_srli_epi16(q2, 4), m);
  n->hi3 = _mm256_and_si256(_mm256_srli_epi16(q3, 4), m);
  n->d = d;
}
HWY_INLINE void UnpackQ40(const Q40x8& blk, Q40Nibbles* n) {
  UnpackQ40(blk.q[0], blk.q[1], blk.q[2], blk.q[3], blk.d, n);
}

#if HWY_TARGET == HWY_AVX3_DL
// AVX512-VNNI: acc += Σ_4 u8 × s8 per int32 lane, the EVEX form through asm (Highway 1.0.3's
// AVX3_DL target string enables only the VEX avxvnni form; its run-time check guarantees the
// EVEX one, see matmul_quant-inl.h DpBusd).
HWY_INLINE __m256i LaneDpBusd(__m256i acc, __m256i u, __m256i s) {
  asm("%{evex%} vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}
// acc += Σ_2 s16 × s16 per int32 lane (vpdpwssd, not saturating).
HWY_INLINE __m256i LaneDpWssd(__m256i acc, __m256i a, __m256i b) {
  asm("%{evex%} vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}
#endif

// One block of one activation row: acc (lane c = column c) = fma(d_w · dx, isum_c, acc).
//   x: the row's 32 int8 quants of this block; dx, off: its scale and −8 · Σ quants.
// With VNNI the 8 nibble dots go straight into int32 lanes (vpdpbusd, two chains of 4): 8 + 1
// integer operations a row and block instead of 8 maddubs + 7 add + 1 madd. Both sums are exact,
// so isum — and every output bit — is the same on either path.
HWY_INLINE __m256 Q40Row(const Q40Nibbles& n, const int8_t* HWY_RESTRICT x, float dx, int32_t off,
                         __m256 acc) {
#if HWY_TARGET == HWY_AVX3_DL
  __m256i lo = LaneDpBusd(_mm256_setzero_si256(), n.lo0, Bcast4(x));
  __m256i hi = LaneDpBusd(_mm256_setzero_si256(), n.hi0, Bcast4(x + 16));
  lo = LaneDpBusd(lo, n.lo1, Bcast4(x + 4));
  hi = LaneDpBusd(hi, n.hi1, Bcast4(x + 20));
  lo = LaneDpBusd(lo, n.lo2, Bcast4(x + 8));
  hi = LaneDpBusd(hi, n.hi2, Bcast4(x + 24));
  lo = LaneDpBusd(lo, n.lo3, Bcast4(x + 12));
  hi = LaneDpBusd(hi, n.hi3, Bcast4(x + 28));
  const __m256i isum = _mm256_add_epi32(_mm256_add_epi32(lo, hi), _mm256_set1_epi32(off));
#else
  __m256i p = _mm256_maddubs_epi16(n.lo0, Bcast4(x));
  p = _mm256_add_epi16(p, _mm256_maddubs_epi16(n.lo1, Bcast4(x + 4)));
  p = _mm256_add_epi16(p, _mm256_maddubs_epi16(n.lo2, Bcast4(x + 8)));
  p = _mm256_add_epi16(p, _mm256_maddubs_epi16(n.lo3, Bcast4(x + 12)));
  p = _mm256_add_epi16(p, _mm256_maddubs_epi16(n.hi0, Bcast4(x + 16)));
  p = _mm256_add_epi16(p, _mm256_maddubs_epi16(n.hi1, Bcast4(x + 20)));
  p = _mm256_add_epi16(p, _mm256_maddubs_epi16(n.hi2, Bcast4(x + 24)));
  p = _mm256_add_epi16(p, _mm256_maddubs_epi16(n.hi3, Bcast4(x + 28)));
  const __m256i isum =
      _mm256_add_epi32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)), _mm256_set1_epi32(off));
#endif
  return _mm256_fmadd_ps(_mm256_mul_ps(n.d, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(isum), acc);
}

// ---------------------------------------------------------------------------------------------
// Q4_0

// GEMV: 8 columns (rows w + c · nb of the weights) against activation row 0, interleaving each
// block in registers. Not inlined: one copy of this loop for full and padded groups. (`inline`
// for the linker: matmul.cpp and repack.cpp both compile this header.)
inline HWY_NOINLINE __m256 Q40GemvGroup(const LaneActs& a, const BlockQ4_0* HWY_RESTRICT w,
                                        size_t nb) {
  __m256 acc = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    PrefetchNextGroup(w, nb * sizeof(BlockQ4_0), b, kLaneCols * sizeof(BlockQ4_0));
    Q40x8 blk;
    InterleaveQ40(w, nb, b, &blk);
    Q40Nibbles n;
    UnpackQ40(blk, &n);
    acc = Q40Row(n, a.q8() + b * kQK, a.d[b], a.s8[b], acc);
  }
  return acc;
}

// Where the panel kernels read block b of 8 interleaved columns: the GEMM's per-task panel, or a
// group of repacked weights (quants [nb][128 bytes], then scales [nb][8] f16).
struct Q40PanelSrc {
  const Q40x8* HWY_RESTRICT p;
  HWY_INLINE void Prefetch(size_t) const {}  // the panel was just written by this thread
  HWY_INLINE void Load(size_t b, Q40Nibbles* n) const { UnpackQ40(p[b], n); }
};

// Repacked weights are one stream per group: the GEMV and every GEMM tile fetch the quants 16 KiB
// ahead (past the group's end, the next group's) into L2, as the raw GEMV fetches the next 8 rows
// (the GEMM without it: a 4-row decode step of the 1.5B took 65 ms against 43 ms, 2026-12-03,
// docs/log/2026-12-03-helper-cpu17-cpu-batched-decode.md). Distance and level measured on the 1.5B
// shapes (docs/log/2026-11-30-cpu-weight-repacking.md): 8 KiB or L1 left the Q4_0 GEMV behind the
// raw one.
constexpr size_t kPackedAhead = 16384;
HWY_INLINE void PrefetchPacked(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
}
struct Q40PackedSrc {
  static constexpr size_t kQBytes = 4 * 32;  // interleaved quants of one block of 8 columns
  const uint8_t* HWY_RESTRICT q;
  const uint16_t* HWY_RESTRICT d;
  HWY_INLINE void Prefetch(size_t b) const {
    const uint8_t* p = q + b * kQBytes + kPackedAhead;
    PrefetchPacked(p);
    PrefetchPacked(p + 64);
  }
  // Straight from memory into registers (a Q40x8 in between went through the stack).
  HWY_INLINE void Load(size_t b, Q40Nibbles* n) const {
    const __m256i* qb = reinterpret_cast<const __m256i*>(q + b * kQBytes);
    UnpackQ40(_mm256_loadu_si256(qb), _mm256_loadu_si256(qb + 1), _mm256_loadu_si256(qb + 2),
              _mm256_loadu_si256(qb + 3),
              _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d + b * kLaneCols))),
              n);
  }
};

// Raw rows read by the skinny GEMM (LaneSkinny): block b of the 8 columns interleaved in
// registers as the GEMV does, once for all the rows of a tile, with the GEMV's prefetch of the
// next 8 rows. No panel is written, so the weights are read once per step as in the GEMV.
struct Q40RawSrc {
  const BlockQ4_0* HWY_RESTRICT w;  // 8 rows of nb blocks (row stride nb)
  size_t nb;
  HWY_INLINE void Prefetch(size_t) const {}
  HWY_INLINE void Load(size_t b, Q40Nibbles* n) const {
    PrefetchNextGroup(w, nb * sizeof(BlockQ4_0), b, kLaneCols * sizeof(BlockQ4_0));
    Q40x8 blk;
    InterleaveQ40(w, nb, b, &blk);
    UnpackQ40(blk, n);
  }
};

// GEMM: RT activation rows (r0 ..) against a panel of 8 interleaved columns [nb]; named
// accumulators so that they stay in registers. RT = 1 on repacked weights is also the GEMV.
template <int RT, class Src>
HWY_NOINLINE void Q40PanelRows(const LaneActs& a, size_t r0, Src panel, __m256* acc_out) {
  static_assert(RT >= 1 && RT <= 4, "Q40PanelRows handles 1..4 rows");
  const size_t K = a.K, nb = a.nb;
  const int8_t* HWY_RESTRICT x = a.q8() + r0 * K;  // row r at x + r · K
  const float* HWY_RESTRICT d = a.d + r0 * nb;     // row r at d + r · nb
  const int32_t* HWY_RESTRICT s = a.s8 + r0 * nb;
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
  for (size_t b = 0; b < nb; ++b) {
    panel.Prefetch(b);
    Q40Nibbles n;
    panel.Load(b, &n);
    const int8_t* xb = x + b * kQK;
    c0 = Q40Row(n, xb, d[b], s[b], c0);
    if constexpr (RT > 1) c1 = Q40Row(n, xb + K, d[nb + b], s[nb + b], c1);
    if constexpr (RT > 2) c2 = Q40Row(n, xb + 2 * K, d[2 * nb + b], s[2 * nb + b], c2);
    if constexpr (RT > 3) c3 = Q40Row(n, xb + 3 * K, d[3 * nb + b], s[3 * nb + b], c3);
  }
  acc_out[0] = c0;
  if constexpr (RT > 1) acc_out[1] = c1;
  if constexpr (RT > 2) acc_out[2] = c2;
  if constexpr (RT > 3) acc_out[3] = c3;
}

#if HWY_TARGET == HWY_AVX3_DL
// QuantizeActivationRow (matmul_quant-inl.h) and Q4_0's offsets, a block in two zmm: the same
// amax (an exact max), the same scalar d and 1/d, the same multiply and round-to-integer in the
// current rounding mode, the low bytes of the same int32 (vpmovdb, as the scalar code's store of
// cvttss2si), an exact int32 sum of those bytes; a block with a non-finite value gets NaN d and
// s, zero quants and offset, as there. So the same bytes and floats as the scalar loop (the
// targets test compares AVX3_DL's outputs with AVX2's, which runs it), at ~1/8 of its cost
// (the scalar loop was ~6% of a pp64 profile).
HWY_INLINE void QuantizeQ40RowZ(const float* HWY_RESTRICT x, size_t K, int8_t* HWY_RESTRICT q,
                                float* HWY_RESTRICT d, int32_t* HWY_RESTRICT off,
                                float* HWY_RESTRICT s) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  constexpr int kRound = _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC;  // as std::nearbyint
  for (size_t b = 0; b < K / kQK; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + b * kQK), x1 = _mm512_loadu_ps(x + b * kQK + 16);
    const __m512 a0 = _mm512_andnot_ps(sign, x0), a1 = _mm512_andnot_ps(sign, x1);
    int8_t* qb = q + b * kQK;
    // |x| < inf is false for ±inf and NaN.
    if ((_mm512_cmp_ps_mask(a0, inf, _CMP_LT_OQ) & _mm512_cmp_ps_mask(a1, inf, _CMP_LT_OQ)) !=
        0xFFFF) {
      d[b] = s[b] = std::numeric_limits<float>::quiet_NaN();
      std::memset(qb, 0, kQK);
      off[b] = 0;
      continue;
    }
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
    const float db = amax / 127.0f;
    const float id = db != 0.0f ? 127.0f / amax : 0.0f;
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i i0 = _mm512_cvttps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(x0, vid), kRound));
    const __m512i i1 = _mm512_cvttps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(x1, vid), kRound));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm512_cvtepi32_epi8(i0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), _mm512_cvtepi32_epi8(i1));
    // The stored bytes, sign-extended back, summed.
    const __m512i t = _mm512_add_epi32(_mm512_srai_epi32(_mm512_slli_epi32(i0, 24), 24),
                                       _mm512_srai_epi32(_mm512_slli_epi32(i1, 24), 24));
    const int32_t sum = _mm512_reduce_add_epi32(t);
    d[b] = db;
    s[b] = db * float(sum);
    off[b] = -8 * sum;
  }
}
#endif

#if HWY_TARGET == HWY_AVX3_DL
// ---------------------------------------------------------------------------------------------
// Q4_0 on AVX3_DL: 16 columns in the 16 lanes of a zmm, for the skinny GEMM (2 ≤ R ≤ 8, batched
// decode, Q40SkinnyWide below) and the panel GEMM (R > 8, prefill, LaneWideGemm below).
// The 8-column kernels above run 8 ymm vpdpbusd a row and block; here 8 zmm vpdpbusd cover 16
// columns, and a zmm vpdpbusd costs about what a ymm one does (a loop of independent dots on a
// 2-core Sapphire-Rapids-class Xeon: 1.5-2.1x the MACs a second); 4-8 row steps are
// compute-bound on 2 cores (docs/cpu_kernels.md). The layout is Q40x8's with four 128-bit
// lanes instead of two (lane L holds columns 4L .. 4L + 3), the integer dots are exact and the
// float operations per lane are Q40Row's (fma(d_w · d_x, float(isum), acc) per block in order),
// so every output bit is the 8-column kernels' (tests: QuantMatMul skinny rows, the targets test).

constexpr size_t kZCols = 16;       // columns per zmm group
constexpr size_t kZSkinnyRows = 8;  // rows of one zmm register tile (32 zmm registers)

// acc += Σ_4 u8 × s8 per int32 lane (zmm vpdpbusd; asm for the reason LaneDpBusd gives).
HWY_INLINE __m512i ZDpBusd(__m512i acc, __m512i u, __m512i s) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}

HWY_INLINE __m512i ZBcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Block b of 16 columns, unpacked (Q40Nibbles with 16 lanes).
struct Q40Nibbles16 {
  __m512i lo0, lo1, lo2, lo3;  // elements 4j .. 4j + 3 of each column (j = 0..3)
  __m512i hi0, hi1, hi2, hi3;  // elements 16 + 4j ..
  __m512 d;
};

// The f16 scales d of the 16 blocks p + c · stride (c = 0..15) as f32 lanes, exactly.
template <class Block>
HWY_INLINE __m512 ZScales16(const Block* HWY_RESTRICT p, size_t stride) {
  auto h = [&](size_t c) { return short(p[c * stride].d); };
  return _mm512_cvtph_ps(_mm256_setr_epi16(h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7), h(8),
                                           h(9), h(10), h(11), h(12), h(13), h(14), h(15)));
}

// Block b of the 16 rows w + c · stride interleaved and unpacked in registers: rows c, c + 4,
// c + 8, c + 12 in the four 128-bit lanes, then InterleaveQ40's 4×4 dword transpose per lane.
HWY_INLINE void InterleaveQ40x16(const BlockQ4_0* HWY_RESTRICT w, size_t stride, size_t b,
                                 Q40Nibbles16* HWY_RESTRICT n) {
  const BlockQ4_0* p = w + b;
  auto load = [&](size_t c) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[c * stride].qs));
  };
  auto quad = [&](size_t c) {
    __m512i v = _mm512_castsi128_si512(load(c));
    v = _mm512_inserti32x4(v, load(c + 4), 1);
    v = _mm512_inserti32x4(v, load(c + 8), 2);
    return _mm512_inserti32x4(v, load(c + 12), 3);
  };
  const __m512i a0 = quad(0), a1 = quad(1), a2 = quad(2), a3 = quad(3);
  const __m512i t0 = _mm512_unpacklo_epi32(a0, a1), t1 = _mm512_unpackhi_epi32(a0, a1);
  const __m512i t2 = _mm512_unpacklo_epi32(a2, a3), t3 = _mm512_unpackhi_epi32(a2, a3);
  const __m512i q0 = _mm512_unpacklo_epi64(t0, t2), q1 = _mm512_unpackhi_epi64(t0, t2);
  const __m512i q2 = _mm512_unpacklo_epi64(t1, t3), q3 = _mm512_unpackhi_epi64(t1, t3);
  const __m512i m = _mm512_set1_epi8(0x0F);
  n->lo0 = _mm512_and_si512(q0, m);
  n->lo1 = _mm512_and_si512(q1, m);
  n->lo2 = _mm512_and_si512(q2, m);
  n->lo3 = _mm512_and_si512(q3, m);
  n->hi0 = _mm512_and_si512(_mm512_srli_epi16(q0, 4), m);
  n->hi1 = _mm512_and_si512(_mm512_srli_epi16(q1, 4), m);
  n->hi2 = _mm512_and_si512(_mm512_srli_epi16(q2, 4), m);
  n->hi3 = _mm512_and_si512(_mm512_srli_epi16(q3, 4), m);
  n->d = ZScales16(p, stride);
}

// Q40Row on 16 lanes: the same integer sums (vpdpbusd, two chains of 4) and float operations.
HWY_INLINE __m512 Q40Row16(const Q40Nibbles16& n, const int8_t* HWY_RESTRICT x, float dx,
                           int32_t off, __m512 acc) {
  __m512i lo = ZDpBusd(_mm512_setzero_si512(), n.lo0, ZBcast4(x));
  __m512i hi = ZDpBusd(_mm512_setzero_si512(), n.hi0, ZBcast4(x + 16));
  lo = ZDpBusd(lo, n.lo1, ZBcast4(x + 4));
  hi = ZDpBusd(hi, n.hi1, ZBcast4(x + 20));
  lo = ZDpBusd(lo, n.lo2, ZBcast4(x + 8));
  hi = ZDpBusd(hi, n.hi2, ZBcast4(x + 24));
  lo = ZDpBusd(lo, n.lo3, ZBcast4(x + 12));
  hi = ZDpBusd(hi, n.hi3, ZBcast4(x + 28));
  const __m512i isum = _mm512_add_epi32(_mm512_add_epi32(lo, hi), _mm512_set1_epi32(off));
  return _mm512_fmadd_ps(_mm512_mul_ps(n.d, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(isum), acc);
}

// acc += Σ_4 u8 × s8 per int32 lane against the 4 activation bytes at x broadcast to every lane
// by the instruction itself ({1to16}: no broadcast of its own, one fused uop with the load).
HWY_INLINE __m512i ZDpBusdBcast(__m512i acc, __m512i u, const int8_t* x) {
  struct Bytes4 {
    int8_t v[4];
  };
  asm("vpdpbusd %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(u), "m"(*reinterpret_cast<const Bytes4*>(x)));
  return acc;
}

// Q40Row16 for register tiles of many rows: the 8 dots in one chain that starts from the offset
// (a broadcast load: no add or sub of its own; the rows of a tile are the independent chains),
// the activations broadcast by vpdpbusd. Exact int32 sums in another order, the same float
// operations: the same bits.
HWY_INLINE __m512 Q40TileRow16(const Q40Nibbles16& n, const int8_t* HWY_RESTRICT x, float dx,
                               int32_t off, __m512 acc) {
  __m512i i = ZDpBusdBcast(_mm512_set1_epi32(off), n.lo0, x);
  i = ZDpBusdBcast(i, n.hi0, x + 16);
  i = ZDpBusdBcast(i, n.lo1, x + 4);
  i = ZDpBusdBcast(i, n.hi1, x + 20);
  i = ZDpBusdBcast(i, n.lo2, x + 8);
  i = ZDpBusdBcast(i, n.hi2, x + 24);
  i = ZDpBusdBcast(i, n.lo3, x + 12);
  i = ZDpBusdBcast(i, n.hi3, x + 28);
  return _mm512_fmadd_ps(_mm512_mul_ps(n.d, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(i), acc);
}

// Q4_0 panel GEMM on AVX3_DL (R > 8, prefill): the 16-column layout above, interleaved and
// unpacked once per task into the thread's panel ([nb] Q40Nibbles16, 576 bytes a block), read by
// register tiles of 8 rows (then the last 1..7 rows as one tile). The 8-column 4-row tile of
// Q40PanelRows spent 8 ymm vpdpbusd a row and block on 8 columns and kept its accumulators on the
// stack; here 8 zmm ones cover 16 columns, the 8 accumulators and a block's 8 nibble vectors stay
// in registers, and the nibbles are unpacked once per task (a tile only loads them), for 11
// vector ALU operations a row and block (Q40TileRow16). Tasks, their order and the epilogue are
// LaneGemm's (kLaneTaskRows × kLaneTaskCols, 2 groups of 16 a task); per output the integer dots
// are exact and the float operations Q40Row's, so every bit is the 8-column GEMM's.

constexpr size_t kZTileRows = 8;  // rows of one register tile of the panel GEMM

// RT activation rows (r0 ..) against the panel [nb] of 16 unpacked columns.
template <int RT>
HWY_NOINLINE void Q40PanelRows16(const LaneActs& a, size_t r0,
                                 const Q40Nibbles16* HWY_RESTRICT panel, __m512* acc_out) {
  static_assert(RT >= 1 && RT <= int(kZTileRows), "Q40PanelRows16 handles 1..8 rows");
  const size_t K = a.K, nb = a.nb;
  const int8_t* HWY_RESTRICT x = a.q8() + r0 * K;  // row r at x + r · K
  const float* HWY_RESTRICT d = a.d + r0 * nb;     // row r at d + r · nb
  const int32_t* HWY_RESTRICT s = a.s8 + r0 * nb;
  // Named accumulators (an array of them was stored to the stack every block).
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
  for (size_t b = 0; b < nb; ++b) {
    const Q40Nibbles16 n = panel[b];
    const int8_t* xb = x + b * kQK;
    auto row = [&](size_t r, __m512& c) {
      c = Q40TileRow16(n, xb + r * K, d[r * nb + b], s[r * nb + b], c);
    };
    row(0, c0);
    if constexpr (RT > 1) row(1, c1);
    if constexpr (RT > 2) row(2, c2);
    if constexpr (RT > 3) row(3, c3);
    if constexpr (RT > 4) row(4, c4);
    if constexpr (RT > 5) row(5, c5);
    if constexpr (RT > 6) row(6, c6);
    if constexpr (RT > 7) row(7, c7);
  }
  const __m512 c[kZTileRows] = {c0, c1, c2, c3, c4, c5, c6, c7};
  for (int r = 0; r < RT; ++r) acc_out[r] = c[r];
}
#endif  // HWY_AVX3_DL

struct Q40Kernel {
  using Block = BlockQ4_0;
  using Panel = Q40x8;
  using XQ = int8_t;
  static constexpr size_t kBlockElems = kQK;
  static void Quantize(const float* x, size_t K, int8_t* q, float* d, int32_t* s8, float* tmp) {
#if HWY_TARGET == HWY_AVX3_DL
    QuantizeQ40RowZ(x, K, q, d, s8, tmp);
#else
    QuantizeActivationRow(x, int64_t(K), q, d, tmp);
    for (size_t b = 0; b < K / kQK; ++b) {
      int32_t s = 0;
      for (size_t j = 0; j < kQK; ++j) s += q[b * kQK + j];
      s8[b] = -8 * s;  // the nibbles' offset: Σ (nib − 8) · x = Σ nib · x − 8 · Σ x
    }
#endif
  }
  static __m256 Gemv(const LaneActs& a, const Block* w, size_t nb) {
    return Q40GemvGroup(a, w, nb);
  }
  static void Interleave(const Block* w, size_t stride, size_t b, Panel* out) {
    InterleaveQ40(w, stride, b, out);
  }
#if HWY_TARGET == HWY_AVX3_DL
  // The prefill GEMM's (LaneWideGemm): blocks of 16 columns unpacked into the panel, read by
  // register tiles of RT rows.
  using Panel16 = Q40Nibbles16;
  static void Interleave16(const Block* w, size_t stride, size_t b, Q40Nibbles16* out) {
    InterleaveQ40x16(w, stride, b, out);
  }
  template <int RT>
  static void Rows16(const LaneActs& a, size_t r0, const Q40Nibbles16* panel, __m512* acc) {
    Q40PanelRows16<RT>(a, r0, panel, acc);
  }
#endif
  using PanelSrc = Q40PanelSrc;
  using PackedSrc = Q40PackedSrc;
  using RawSrc = Q40RawSrc;  // the skinny GEMM's (LaneSkinny)
  // RT rows against one group of 8 columns, from a panel (PanelSrc) or repacked (PackedSrc).
  template <int RT, class Src>
  static void Rows(const LaneActs& a, size_t r0, Src src, __m256* acc) {
    Q40PanelRows<RT>(a, r0, src, acc);
  }
};

// ---------------------------------------------------------------------------------------------
// Q8_0

// One block of 8 columns for the GEMM panel (288 bytes): q[j] = [k (4j, 4j+1) of columns 0..7 |
// k (4j+2, 4j+3) of columns 0..7], signed bytes.
struct Q80x8 {
  __m256i q[8];
  __m256 d;
};

// Block b of the 8 rows w + c · stride as a panel block: a transpose of 16-bit units (pairs of
// quants), columns × 16 units → units × 8 columns.
HWY_INLINE void InterleaveQ80(const BlockQ8_0* HWY_RESTRICT w, size_t stride, size_t b,
                              Q80x8* HWY_RESTRICT out) {
  const BlockQ8_0* p = w + b;
  auto load = [&](size_t c) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[c * stride].qs));
  };
  const __m256i r0 = load(0), r1 = load(1), r2 = load(2), r3 = load(3);
  const __m256i r4 = load(4), r5 = load(5), r6 = load(6), r7 = load(7);
  // Per 128-bit half (units 0..7, 8..15): pairs of columns, then quads, then all 8.
  const __m256i s01l = _mm256_unpacklo_epi16(r0, r1), s01h = _mm256_unpackhi_epi16(r0, r1);
  const __m256i s23l = _mm256_unpacklo_epi16(r2, r3), s23h = _mm256_unpackhi_epi16(r2, r3);
  const __m256i s45l = _mm256_unpacklo_epi16(r4, r5), s45h = _mm256_unpackhi_epi16(r4, r5);
  const __m256i s67l = _mm256_unpacklo_epi16(r6, r7), s67h = _mm256_unpackhi_epi16(r6, r7);
  const __m256i t0 = _mm256_unpacklo_epi32(s01l, s23l), t1 = _mm256_unpackhi_epi32(s01l, s23l);
  const __m256i t2 = _mm256_unpacklo_epi32(s01h, s23h), t3 = _mm256_unpackhi_epi32(s01h, s23h);
  const __m256i t4 = _mm256_unpacklo_epi32(s45l, s67l), t5 = _mm256_unpackhi_epi32(s45l, s67l);
  const __m256i t6 = _mm256_unpacklo_epi32(s45h, s67h), t7 = _mm256_unpackhi_epi32(s45h, s67h);
  // u[i]: unit i of columns 0..7 | unit 8 + i of columns 0..7.
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t4), u1 = _mm256_unpackhi_epi64(t0, t4);
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t5), u3 = _mm256_unpackhi_epi64(t1, t5);
  const __m256i u4 = _mm256_unpacklo_epi64(t2, t6), u5 = _mm256_unpackhi_epi64(t2, t6);
  const __m256i u6 = _mm256_unpacklo_epi64(t3, t7), u7 = _mm256_unpackhi_epi64(t3, t7);
  out->q[0] = _mm256_permute2x128_si256(u0, u1, 0x20);
  out->q[1] = _mm256_permute2x128_si256(u2, u3, 0x20);
  out->q[2] = _mm256_permute2x128_si256(u4, u5, 0x20);
  out->q[3] = _mm256_permute2x128_si256(u6, u7, 0x20);
  out->q[4] = _mm256_permute2x128_si256(u0, u1, 0x31);
  out->q[5] = _mm256_permute2x128_si256(u2, u3, 0x31);
  out->q[6] = _mm256_permute2x128_si256(u4, u5, 0x31);
  out->q[7] = _mm256_permute2x128_si256(u6, u7, 0x31);
  out->d = LaneScales(p, stride);
}

HWY_INLINE __m256i Bcast2x16(const int16_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// GEMV: 8 columns (rows w + c · nb) against activation row 0. Each column's block is 2 madds
// against the activation block (8 int32 lanes); the 8 columns' lanes are summed into lane c by a
// transpose-and-add tree (integer, exact).
inline HWY_NOINLINE __m256 Q80GemvGroup(const LaneActs& a, const BlockQ8_0* HWY_RESTRICT w,
                                        size_t nb) {
  __m256 acc = _mm256_setzero_ps();
  const int16_t* HWY_RESTRICT xq = a.q16();
  for (size_t b = 0; b < nb; ++b) {
    PrefetchNextGroup(w, nb * sizeof(BlockQ8_0), b, kLaneCols * sizeof(BlockQ8_0));
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * kQK));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * kQK + 16));
    auto col = [&](size_t c) {
      const int8_t* q = w[c * nb + b].qs;
      const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
      const __m256i w1 =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)));
      return _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));
    };
    const __m256i v0 = col(0), v1 = col(1), v2 = col(2), v3 = col(3);
    const __m256i v4 = col(4), v5 = col(5), v6 = col(6), v7 = col(7);
    // Per 128-bit half: [v0 0+2, v1 0+2, v0 1+3, v1 1+3], then [Σv0, Σv1, Σv2, Σv3].
    const __m256i a01 =
        _mm256_add_epi32(_mm256_unpacklo_epi32(v0, v1), _mm256_unpackhi_epi32(v0, v1));
    const __m256i a23 =
        _mm256_add_epi32(_mm256_unpacklo_epi32(v2, v3), _mm256_unpackhi_epi32(v2, v3));
    const __m256i a45 =
        _mm256_add_epi32(_mm256_unpacklo_epi32(v4, v5), _mm256_unpackhi_epi32(v4, v5));
    const __m256i a67 =
        _mm256_add_epi32(_mm256_unpacklo_epi32(v6, v7), _mm256_unpackhi_epi32(v6, v7));
    const __m256i b0 =
        _mm256_add_epi32(_mm256_unpacklo_epi64(a01, a23), _mm256_unpackhi_epi64(a01, a23));
    const __m256i b1 =
        _mm256_add_epi32(_mm256_unpacklo_epi64(a45, a67), _mm256_unpackhi_epi64(a45, a67));
    const __m256i isum = _mm256_add_epi32(_mm256_permute2x128_si256(b0, b1, 0x20),
                                          _mm256_permute2x128_si256(b0, b1, 0x31));
    acc = _mm256_fmadd_ps(_mm256_mul_ps(LaneScales(w + b, nb), _mm256_set1_ps(a.d[b])),
                          _mm256_cvtepi32_ps(isum), acc);
  }
  return acc;
}

// Where the panel kernels read block b: the GEMM's per-task panel, or a group of repacked
// weights (quants [nb][256 bytes] in the panel's order, then scales [nb][8] f16).
struct Q80PanelSrc {
  const Q80x8* HWY_RESTRICT p;
  HWY_INLINE const __m128i* Quants(size_t b) const {
    return reinterpret_cast<const __m128i*>(p[b].q);
  }
  HWY_INLINE __m256 Scales(size_t b) const { return p[b].d; }
  HWY_INLINE void Prefetch(size_t) const {}
};
struct Q80PackedSrc {
  static constexpr size_t kQBytes = 8 * 32;
  const uint8_t* HWY_RESTRICT q;
  const uint16_t* HWY_RESTRICT d;
  HWY_INLINE const __m128i* Quants(size_t b) const {
    return reinterpret_cast<const __m128i*>(q + b * kQBytes);
  }
  HWY_INLINE __m256 Scales(size_t b) const {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d + b * kLaneCols)));
  }
  HWY_INLINE void Prefetch(size_t b) const {
    const uint8_t* p = q + b * kQBytes + kPackedAhead;
    for (size_t o = 0; o < kQBytes; o += 64) PrefetchPacked(p + o);
  }
};

// Raw rows read by the skinny GEMM (LaneSkinny): block b of the 8 columns interleaved into
// `tmp` when its quants are asked for (Q80PanelRows asks for Quants(b), then Scales(b)).
struct Q80RawSrc {
  const BlockQ8_0* HWY_RESTRICT w;  // 8 rows of nb blocks (row stride nb)
  size_t nb;
  mutable Q80x8 tmp{};
  HWY_INLINE void Prefetch(size_t) const {}
  HWY_INLINE const __m128i* Quants(size_t b) const {
    PrefetchNextGroup(w, nb * sizeof(BlockQ8_0), b, kLaneCols * sizeof(BlockQ8_0));
    InterleaveQ80(w, nb, b, &tmp);
    return reinterpret_cast<const __m128i*>(tmp.q);
  }
  HWY_INLINE __m256 Scales(size_t) const { return tmp.d; }
};

// GEMM: RT activation rows (r0 ..) against a panel of 8 interleaved columns [nb]. RT = 1 on
// repacked weights is also the GEMV.
template <int RT, class Src>
HWY_NOINLINE void Q80PanelRows(const LaneActs& a, size_t r0, Src panel, __m256* acc_out) {
  static_assert(RT >= 1 && RT <= 4, "Q80PanelRows handles 1..4 rows");
  const size_t K = a.K, nb = a.nb;
  const int16_t* HWY_RESTRICT x = a.q16() + r0 * K;  // row r at x + r · K
  const float* HWY_RESTRICT d = a.d + r0 * nb;
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
  for (size_t b = 0; b < nb; ++b) {
    panel.Prefetch(b);
    const __m128i* HWY_RESTRICT pq = panel.Quants(b);
    const int16_t* xb = x + b * kQK;
    __m256i i0 = _mm256_setzero_si256(), i1 = i0, i2 = i0, i3 = i0;
#if HWY_TARGET == HWY_AVX3_DL
    // AVX3_DL: the wb products in chains of their own (h), added once a block: one chain of 16
    // dependent vpdpwssd a row and block held a 4-row tile to the dot latency. Exact int32 sums
    // in any order, so the same isum.
    __m256i h0 = i0, h1 = i0, h2 = i0, h3 = i0;
#endif
    // Not unrolled: unrolled, GCC reassociates the 64 exact int32 adds into one tree and spills
    // the madds (measured 1.9x slower).
#pragma GCC unroll 1
    for (int j = 0; j < 8; ++j) {
      const __m256i wa = _mm256_cvtepi8_epi16(_mm_loadu_si128(pq + 2 * j));
      const __m256i wb = _mm256_cvtepi8_epi16(_mm_loadu_si128(pq + 2 * j + 1));
#if HWY_TARGET == HWY_AVX3_DL
      // i, h += the row's products of each column by two vpdpwssd (no saturation, and madd's one
      // overflow, -32768 · -32768 twice, cannot occur with int8 weights), the same exact int32
      // as madd + add.
      auto row = [&](__m256i& i, __m256i& h, const int16_t* xr) {
        i = LaneDpWssd(i, wa, Bcast2x16(xr + 4 * j));
        h = LaneDpWssd(h, wb, Bcast2x16(xr + 4 * j + 2));
      };
      row(i0, h0, xb);
      if constexpr (RT > 1) row(i1, h1, xb + K);
      if constexpr (RT > 2) row(i2, h2, xb + 2 * K);
      if constexpr (RT > 3) row(i3, h3, xb + 3 * K);
#else
      // i += the row's 4 products of each column.
      auto row = [&](__m256i i, const int16_t* xr) {
        return _mm256_add_epi32(i,
                                _mm256_add_epi32(_mm256_madd_epi16(wa, Bcast2x16(xr + 4 * j)),
                                                 _mm256_madd_epi16(wb, Bcast2x16(xr + 4 * j + 2))));
      };
      i0 = row(i0, xb);
      if constexpr (RT > 1) i1 = row(i1, xb + K);
      if constexpr (RT > 2) i2 = row(i2, xb + 2 * K);
      if constexpr (RT > 3) i3 = row(i3, xb + 3 * K);
#endif
    }
#if HWY_TARGET == HWY_AVX3_DL
    i0 = _mm256_add_epi32(i0, h0);
    if constexpr (RT > 1) i1 = _mm256_add_epi32(i1, h1);
    if constexpr (RT > 2) i2 = _mm256_add_epi32(i2, h2);
    if constexpr (RT > 3) i3 = _mm256_add_epi32(i3, h3);
#endif
    const __m256 pd = panel.Scales(b);
    c0 = _mm256_fmadd_ps(_mm256_mul_ps(pd, _mm256_set1_ps(d[b])), _mm256_cvtepi32_ps(i0), c0);
    if constexpr (RT > 1)
      c1 =
          _mm256_fmadd_ps(_mm256_mul_ps(pd, _mm256_set1_ps(d[nb + b])), _mm256_cvtepi32_ps(i1), c1);
    if constexpr (RT > 2)
      c2 = _mm256_fmadd_ps(_mm256_mul_ps(pd, _mm256_set1_ps(d[2 * nb + b])), _mm256_cvtepi32_ps(i2),
                           c2);
    if constexpr (RT > 3)
      c3 = _mm256_fmadd_ps(_mm256_mul_ps(pd, _mm256_set1_ps(d[3 * nb + b])), _mm256_cvtepi32_ps(i3),
                           c3);
  }
  acc_out[0] = c0;
  if constexpr (RT > 1) acc_out[1] = c1;
  if constexpr (RT > 2) acc_out[2] = c2;
  if constexpr (RT > 3) acc_out[3] = c3;
}

#if HWY_TARGET == HWY_AVX3_DL
// ---------------------------------------------------------------------------------------------
// Q8_0 panel GEMM on AVX3_DL (R > 8, prefill; LaneWideGemm): 16 columns in the 16 lanes of a zmm.
// Block b of 16 columns is unpacked once per task into the thread's panel (Q80x16: the quants
// sign-extended to int16 and transposed by pairs, 1088 bytes a block) and read by register tiles
// of 8 rows: a row and block is 16 zmm vpdpwssd (the activation pair broadcast by the instruction,
// {1to16}), then cvt, mul, fma — for 16 columns, where Q80PanelRows's 4-row tile spent 16 ymm
// vpdpwssd on 8 and widened the weights in every tile. The int32 sums are exact (int8 × int16
// products, |isum| ≤ 32 · 128 · 32512 < 2^31: vpdpwssd's wrap-around never occurs) and the float
// operations Q80PanelRows's, so every output bit is the 8-column kernels'.

// One block of 16 columns, as the wide GEMM's panel holds it (1088 bytes).
struct Q80x16 {
  __m512i q[16];  // q[j]: dword c = quants 2j, 2j + 1 of column c as two int16
  __m512 d;       // d of column c
};
static_assert(sizeof(Q80x16) == 1088, "Q80x16: 17 zmm");

// acc += Σ_2 s16 × s16 per int32 lane against the activation pair at x broadcast to every lane by
// the instruction itself ({1to16}, as ZDpBusdBcast).
HWY_INLINE __m512i ZDpWssdBcast(__m512i acc, __m512i w, const int16_t* x) {
  struct Pair {
    int16_t v[2];
  };
  asm("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const Pair*>(x)));
  return acc;
}

// The 16 × 16 dword matrix r (r[c] dword j) transposed in place (r[j] dword c): dwords, then
// qwords within each 128-bit lane, then the 4 × 4 transpose of the 128-bit lanes.
HWY_INLINE void ZTranspose16x16(__m512i* HWY_RESTRICT r) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4i + k] lane L: dword 4L + k of rows 4i .. 4i + 3.
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // r[4L + k] = lane L of u[k], u[4 + k], u[8 + k], u[12 + k].
  for (int k = 0; k < 4; ++k) {
    const __m512i e0 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x44);
    const __m512i e1 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xEE);
    const __m512i e2 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x44);
    const __m512i e3 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xEE);
    r[k] = _mm512_shuffle_i32x4(e0, e2, 0x88);
    r[4 + k] = _mm512_shuffle_i32x4(e0, e2, 0xDD);
    r[8 + k] = _mm512_shuffle_i32x4(e1, e3, 0x88);
    r[12 + k] = _mm512_shuffle_i32x4(e1, e3, 0xDD);
  }
}

// Block b of the 16 rows w + c · stride, unpacked into out.
HWY_INLINE void InterleaveQ80x16(const BlockQ8_0* HWY_RESTRICT w, size_t stride, size_t b,
                                 Q80x16* HWY_RESTRICT out) {
  const BlockQ8_0* p = w + b;
  __m512i r[16];
#pragma GCC unroll 16
  for (size_t c = 0; c < kZCols; ++c) {
    r[c] = _mm512_cvtepi8_epi16(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[c * stride].qs)));
  }
  ZTranspose16x16(r);
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) out->q[j] = r[j];
  out->d = ZScales16(p, stride);
}

// RT activation rows (r0 ..) against the panel [nb] of 16 unpacked columns; one tile of
// LaneWideGemm. Named accumulators (see Q40PanelRows16); a block in two halves of 8 pair vectors,
// so that 8 weights, 8 int32 chains and 8 float accumulators fit the 32 registers.
template <int RT>
HWY_NOINLINE void Q80PanelRows16(const LaneActs& a, size_t r0, const Q80x16* HWY_RESTRICT panel,
                                 __m512* acc_out) {
  static_assert(RT >= 1 && RT <= int(kZTileRows), "Q80PanelRows16 handles 1..8 rows");
  const size_t K = a.K, nb = a.nb;
  const int16_t* HWY_RESTRICT x = a.q16() + r0 * K;  // row r at x + r · K
  const float* HWY_RESTRICT d = a.d + r0 * nb;       // row r at d + r · nb
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
  for (size_t b = 0; b < nb; ++b) {
    const Q80x16& p = panel[b];
    const int16_t* xb = x + b * kQK;
    __m512i i0 = _mm512_setzero_si512(), i1 = i0, i2 = i0, i3 = i0, i4 = i0, i5 = i0, i6 = i0,
            i7 = i0;
    auto half = [&](int h) __attribute__((always_inline)) {
      const __m512i* q = p.q + 8 * h;
      const __m512i w0 = q[0], w1 = q[1], w2 = q[2], w3 = q[3];
      const __m512i w4 = q[4], w5 = q[5], w6 = q[6], w7 = q[7];
      auto row = [&](size_t r, __m512i& i) {
        const int16_t* xr = xb + r * K + 16 * h;
        i = ZDpWssdBcast(i, w0, xr);
        i = ZDpWssdBcast(i, w1, xr + 2);
        i = ZDpWssdBcast(i, w2, xr + 4);
        i = ZDpWssdBcast(i, w3, xr + 6);
        i = ZDpWssdBcast(i, w4, xr + 8);
        i = ZDpWssdBcast(i, w5, xr + 10);
        i = ZDpWssdBcast(i, w6, xr + 12);
        i = ZDpWssdBcast(i, w7, xr + 14);
      };
      row(0, i0);
      if constexpr (RT > 1) row(1, i1);
      if constexpr (RT > 2) row(2, i2);
      if constexpr (RT > 3) row(3, i3);
      if constexpr (RT > 4) row(4, i4);
      if constexpr (RT > 5) row(5, i5);
      if constexpr (RT > 6) row(6, i6);
      if constexpr (RT > 7) row(7, i7);
    };
    half(0);
    half(1);
    const __m512 pd = p.d;
    auto acc = [&](size_t r, __m512i i, __m512& c) {
      c = _mm512_fmadd_ps(_mm512_mul_ps(pd, _mm512_set1_ps(d[r * nb + b])), _mm512_cvtepi32_ps(i),
                          c);
    };
    acc(0, i0, c0);
    if constexpr (RT > 1) acc(1, i1, c1);
    if constexpr (RT > 2) acc(2, i2, c2);
    if constexpr (RT > 3) acc(3, i3, c3);
    if constexpr (RT > 4) acc(4, i4, c4);
    if constexpr (RT > 5) acc(5, i5, c5);
    if constexpr (RT > 6) acc(6, i6, c6);
    if constexpr (RT > 7) acc(7, i7, c7);
  }
  const __m512 c[kZTileRows] = {c0, c1, c2, c3, c4, c5, c6, c7};
  for (int r = 0; r < RT; ++r) acc_out[r] = c[r];
}
#endif  // HWY_AVX3_DL

struct Q80Kernel {
  using Block = BlockQ8_0;
  using Panel = Q80x8;
  using XQ = int16_t;
  static constexpr size_t kBlockElems = kQK;
  static void Quantize(const float* x, size_t K, int16_t* q, float* d, int32_t*, float*) {
    QuantizeActivationRowWide(x, int64_t(K), q, d);
  }
  static __m256 Gemv(const LaneActs& a, const Block* w, size_t nb) {
    return Q80GemvGroup(a, w, nb);
  }
  static void Interleave(const Block* w, size_t stride, size_t b, Panel* out) {
    InterleaveQ80(w, stride, b, out);
  }
#if HWY_TARGET == HWY_AVX3_DL
  // The prefill GEMM's (LaneWideGemm): blocks of 16 columns widened into the panel, read by
  // register tiles of RT rows.
  using Panel16 = Q80x16;
  static void Interleave16(const Block* w, size_t stride, size_t b, Q80x16* out) {
    InterleaveQ80x16(w, stride, b, out);
  }
  template <int RT>
  static void Rows16(const LaneActs& a, size_t r0, const Q80x16* panel, __m512* acc) {
    Q80PanelRows16<RT>(a, r0, panel, acc);
  }
#endif
  using PanelSrc = Q80PanelSrc;
  using PackedSrc = Q80PackedSrc;
  using RawSrc = Q80RawSrc;  // the skinny GEMM's (LaneSkinny)
  // RT rows against one group of 8 columns, from a panel (PanelSrc) or repacked (PackedSrc).
  template <int RT, class Src>
  static void Rows(const LaneActs& a, size_t r0, Src src, __m256* acc) {
    Q80PanelRows<RT>(a, r0, src, acc);
  }
};

// ---------------------------------------------------------------------------------------------
// Driver: quantize the activation rows (in parallel over rows); R = 1: threads take contiguous
// ranges of 8-column groups; R > 1: one task per (32 columns, 128 rows), each 8-column group
// interleaved into a panel once (or read from the repacked weights) and read by 4-row register
// tiles (then single rows).

constexpr size_t kLaneRowTile = 4;     // activation rows per GEMM register tile
constexpr size_t kLaneTaskCols = 32;   // columns per GEMM task (4 groups of 8)
constexpr size_t kLaneTaskRows = 128;  // rows per GEMM task (the panel is built once per task)
// Up to this many rows (one register tile) the raw Q4_0 / Q8_0 weights go through the skinny
// GEMM (LaneSkinny), above it through the panel GEMM: with two tiles or more, interleaving once
// into the panel beats interleaving in registers per tile (cache-resident 1536×8960 Q4_0, 8
// rows: panel 0.64 ms, skinny 1.23 ms; 151936×1536 Q8_0 from memory, 8 rows: 47 / 44 ms; 4 rows:
// 34 / 23 ms, 2 rows 22 / 15 ms; 2 threads on the shared machine).
constexpr size_t kLaneSkinnyRows = kLaneRowTile;

// The R activation rows quantized into the calling thread's scratch slot 1 (valid until the next
// call on this thread), in parallel over rows.
template <class Kern>
LaneActs QuantizeLaneActs(const float* x, size_t R, size_t K, ThreadPool& pool) {
  using XQ = typename Kern::XQ;
  const size_t nb = K / kQK;
  // Scratch: R · K quants (K is a multiple of 32, so whole floats), then R · nb each of scales,
  // float sums (Q4_K) and int32 −8 · Σq (Q4_0).
  const size_t q_floats = R * K * sizeof(XQ) / sizeof(float);
  float* buf = ThreadScratch(1).Floats(std::max<size_t>(1, q_floats + 3 * R * nb));
  XQ* xq = reinterpret_cast<XQ*>(buf);
  float* xd = buf + q_floats;
  float* xs = xd + R * nb;
  int32_t* s8 = reinterpret_cast<int32_t*>(xs + R * nb);
  pool.ParallelFor(int64_t(R), [&](int64_t r0, int64_t r1, int) {
    for (size_t r = size_t(r0); r < size_t(r1); ++r) {
      Kern::Quantize(x + r * K, K, xq + r * K, xd + r * nb, s8 + r * nb, xs + r * nb);
    }
  });
  return LaneActs{xq, xd, s8, xs, K, nb};
}

// The calling thread's array of at least n Ts (aligned, kept across calls, one array per T): the
// GEMMs' panels, grown to the largest weight a thread has met.
template <class T>
HWY_INLINE T* ThreadPanel(size_t n) {
  thread_local hwy::AlignedFreeUniquePtr<T[]> mem;
  thread_local size_t size = 0;
  if (size < n) {
    mem = hwy::AllocateAligned<T>(n);
    size = n;
  }
  return mem.get();
}

// The columns n .. n + nc (nc < cols) of a partial last group, copied into `cols` zero-padded rows
// in the calling thread's scratch slot 0 (valid until its next use on this thread).
template <class Block>
HWY_INLINE const Block* LanePaddedGroup(const Block* w, size_t nb, size_t n, size_t nc,
                                        size_t cols = kLaneCols) {
  const size_t bytes = cols * nb * sizeof(Block);
  Block* p = reinterpret_cast<Block*>(ThreadScratch(0).Floats((bytes + 3) / 4));
  std::memset(static_cast<void*>(p), 0, bytes);
  std::memcpy(static_cast<void*>(p), w + n * nb, nc * nb * sizeof(Block));
  return p;
}

// Group sources of the GEMM: where a task reads each group of 8 interleaved columns from.
//   ForThread()   a copy for the calling thread (once per range of tasks)
//   Group(n, nc)  columns n .. n + nc (nc = 8 but in the last group) as the Src of Kern::Rows
// Raw rows (LaneMatMul): each group interleaved into the thread's panel, once per task.
template <class Kern>
struct LaneRawSource {
  using Block = typename Kern::Block;
  using Panel = typename Kern::Panel;
  const Block* w;  // N rows of nb blocks
  size_t nb;
  Panel* panel = nullptr;  // ForThread's copy: the thread's [nb] interleaved blocks

  LaneRawSource ForThread() const {
    LaneRawSource g = *this;
    g.panel = ThreadPanel<Panel>(nb);
    return g;
  }
  typename Kern::PanelSrc Group(size_t n, size_t nc) const {
    const Block* src = nc == kLaneCols ? w + n * nb : LanePaddedGroup(w, nb, n, nc);
    for (size_t b = 0; b < nb; ++b) Kern::Interleave(src, nb, b, &panel[b]);
    return {panel};
  }
};

// Where the outputs of one weight of a lane driver go: its group source (the GEMM's), bias (or
// null) and y (row stride: the call's ldy). A pair (MatMulPair) has two, read by the same
// quantized rows in one region: each group of columns of the first, then of the second.
template <class Src>
struct LaneOut {
  Src source;
  const float* bias;
  float* y;
};

// Raw weights: N rows of nb blocks.
template <class Kern>
struct LaneRawOut {
  const typename Kern::Block* w;
  const float* bias;
  float* y;
};

HWY_INLINE void LaneEpilogue(const MatMulEpilogue* epi, size_t r0, size_t r1, size_t n0,
                             size_t n1) {
  if (epi) (*epi)(int64_t(r0), int64_t(r1), int64_t(n0), int64_t(n1));
}

// GEMV (R = 1) of LaneMatMul and LanePackedMatMul: threads take contiguous ranges of 8-column
// groups; group(g, n, nc) writes the outputs of group g (columns n .. n + nc, nc = 8 but in the
// last group) of every weight of the call, then epi gets them. A template so that group inlines
// into the loop.
template <class Group>
HWY_INLINE void LaneGemv(size_t N, const MatMulEpilogue* epi, ThreadPool& pool,
                         const Group& group) {
  const size_t groups = (N + kLaneCols - 1) / kLaneCols;
  pool.ParallelFor(int64_t(groups), [&](int64_t g0, int64_t g1, int) {
    for (size_t g = size_t(g0); g < size_t(g1); ++g) {
      const size_t n = g * kLaneCols, nc = std::min(kLaneCols, N - n);
      group(g, n, nc);
      LaneEpilogue(epi, 0, 1, n, n + nc);
    }
  });
}

// rows (0..3) activation rows from r0 against one group as one register tile; y at row r0.
template <class Kern, class Src>
HWY_INLINE void LaneRowsTail(const LaneActs& acts, size_t r0, size_t rows, const Src& src,
                             const float* bias, size_t nc, float* y, size_t ldy) {
  __m256 acc[kLaneRowTile];
  switch (rows) {
    case 0:
      return;
    case 1:
      Kern::template Rows<1>(acts, r0, src, acc);
      break;
    case 2:
      Kern::template Rows<2>(acts, r0, src, acc);
      break;
    default:
      Kern::template Rows<3>(acts, r0, src, acc);
      break;
  }
  for (size_t i = 0; i < rows; ++i) LaneStore(acc[i], bias, nc, y + i * ldy);
}

// Rows [r0, r1) against one group of 8 columns: 4-row register tiles, then the last 1..3 rows as
// one tile (per row the same arithmetic as single rows); y at row r0 and the group's column.
template <class Kern, class Src>
HWY_INLINE void LaneGroupRows(const LaneActs& acts, size_t r0, size_t r1, const Src& src,
                              const float* bias, size_t nc, float* y, size_t ldy) {
  size_t r = r0;
  __m256 acc[kLaneRowTile];
  for (; r + kLaneRowTile <= r1; r += kLaneRowTile) {
    Kern::template Rows<kLaneRowTile>(acts, r, src, acc);
    for (size_t i = 0; i < kLaneRowTile; ++i) LaneStore(acc[i], bias, nc, y + (r - r0 + i) * ldy);
  }
  LaneRowsTail<Kern>(acts, r, r1 - r, src, bias, nc, y + (r - r0) * ldy, ldy);
}

// GEMM (R > 1) of LaneMatMul and LanePackedMatMul: one task per kLaneTaskRows × kLaneTaskCols
// outputs; in a task, each group of 8 columns of each weight from its source (LaneRawSource,
// LanePackedSource) read by LaneGroupRows; epi gets the task's outputs when it is done.
template <class Kern, class Source, size_t M>
void LaneGemm(const LaneActs& acts, size_t R, size_t N, const LaneOut<Source> (&outs)[M],
              size_t ldy, const MatMulEpilogue* epi, ThreadPool& pool) {
  const TaskGrid<kLaneTaskRows, kLaneTaskCols> tasks(R, N);
  pool.ParallelFor(int64_t(tasks.Count()), [&](int64_t t0, int64_t t1, int) {
    // Raw sources of one kernel share the thread's panel: each group is interleaved and read
    // before the next one is.
    Source sources[M];
    for (size_t o = 0; o < M; ++o) sources[o] = outs[o].source.ForThread();
    for (size_t t = size_t(t0); t < size_t(t1); ++t) {
      const auto [r0, r1, n0, n1] = tasks[t];
      for (size_t n = n0; n < n1; n += kLaneCols) {
        const size_t nc = std::min(kLaneCols, n1 - n);
        for (size_t o = 0; o < M; ++o) {
          const float* bn = outs[o].bias ? outs[o].bias + n : nullptr;
          LaneGroupRows<Kern>(acts, r0, r1, sources[o].Group(n, nc), bn, nc,
                              outs[o].y + r0 * ldy + n, ldy);
        }
      }
      LaneEpilogue(epi, r0, r1, n0, n1);
    }
  });
}

// Skinny GEMM (1 < R <= kLaneSkinnyRows, batched decode) on raw weights: as the GEMV, threads
// take contiguous ranges of 8-column groups and interleave each block in registers, but every
// block serves all R rows (one register tile). The GEMM's panel (one
// interleave pass writing the group to memory, then single-row passes over it for a 2-row
// step) made 2 rows cost 2.7x and 4 rows 3.7x one row on the 1.5B model; reading each weight
// once per step is what batching is for. Per row the same arithmetic as the GEMV and GEMM, so
// every output bit is unchanged.
template <class Kern, size_t M>
void LaneSkinny(const LaneActs& acts, size_t R, size_t N, const LaneRawOut<Kern> (&outs)[M],
                size_t ldy, const MatMulEpilogue* epi, ThreadPool& pool) {
  const size_t nb = acts.K / Kern::kBlockElems;  // weight blocks per row
  const size_t groups = (N + kLaneCols - 1) / kLaneCols;
  pool.ParallelFor(int64_t(groups), [&](int64_t g0, int64_t g1, int) {
    for (size_t g = size_t(g0); g < size_t(g1); ++g) {
      const size_t n = g * kLaneCols, nc = std::min(kLaneCols, N - n);
      for (size_t o = 0; o < M; ++o) {
        const auto* w = outs[o].w;
        const typename Kern::RawSrc src{
            nc == kLaneCols ? w + n * nb : LanePaddedGroup(w, nb, n, nc), nb};
        const float* bn = outs[o].bias ? outs[o].bias + n : nullptr;
        LaneGroupRows<Kern>(acts, 0, R, src, bn, nc, outs[o].y + n, ldy);
      }
      LaneEpilogue(epi, 0, R, n, n + nc);
    }
  });
}

#if HWY_TARGET == HWY_AVX3_DL
// ---------------------------------------------------------------------------------------------
// Q4_0 skinny GEMM on AVX3_DL (2 ≤ R ≤ 8, batched decode): Q40Nibbles16's layout interleaved in
// registers per block from the raw rows, all R rows one register tile.

// RT activation rows (0 ..) against the 16 raw rows w (nb blocks each), each block interleaved
// once for all RT rows; the next 16 rows are prefetched at the pace these are consumed.
template <int RT>
HWY_NOINLINE void Q40SkinnyRows16(const LaneActs& a, const BlockQ4_0* HWY_RESTRICT w,
                                  __m512* acc_out) {
  static_assert(RT >= 1 && RT <= int(kZSkinnyRows), "Q40SkinnyRows16 handles 1..8 rows");
  const size_t K = a.K, nb = a.nb;
  const int8_t* HWY_RESTRICT x = a.q8();
  __m512 c[RT];
  for (int r = 0; r < RT; ++r) c[r] = _mm512_setzero_ps();
  const char* next = reinterpret_cast<const char*>(w + kZCols * nb);
  constexpr size_t kBytes = kZCols * sizeof(BlockQ4_0);  // consumed a block
  for (size_t b = 0; b < nb; ++b) {
    for (size_t o = 0; o < kBytes + 63; o += 64) hwy::Prefetch(next + b * kBytes + o);
    Q40Nibbles16 n;
    InterleaveQ40x16(w, nb, b, &n);
    const int8_t* xb = x + b * kQK;
#pragma GCC unroll 8
    for (int r = 0; r < RT; ++r) {
      c[r] =
          Q40Row16(n, xb + size_t(r) * K, a.d[size_t(r) * nb + b], a.s8[size_t(r) * nb + b], c[r]);
    }
  }
  for (int r = 0; r < RT; ++r) acc_out[r] = c[r];
}

// y[0..nc) of one row (lanes of acc) plus bias (or + 0.0f), as LaneStore: one masked add and
// store (the same IEEE additions as LaneStore's loop).
HWY_INLINE void LaneStore16(__m512 acc, const float* bias, size_t nc, float* y) {
  const __mmask16 m = __mmask16((1u << nc) - 1);  // nc in 1..16
  const __m512 b = bias ? _mm512_maskz_loadu_ps(m, bias) : _mm512_setzero_ps();
  _mm512_mask_storeu_ps(y, m, _mm512_add_ps(acc, b));
}

// R (1..8) rows against the 16 raw rows w: one register tile.
HWY_INLINE void Q40SkinnyTile16(const LaneActs& a, size_t R, const BlockQ4_0* w, __m512* acc) {
  switch (R) {
    case 1:
      return Q40SkinnyRows16<1>(a, w, acc);
    case 2:
      return Q40SkinnyRows16<2>(a, w, acc);
    case 3:
      return Q40SkinnyRows16<3>(a, w, acc);
    case 4:
      return Q40SkinnyRows16<4>(a, w, acc);
    case 5:
      return Q40SkinnyRows16<5>(a, w, acc);
    case 6:
      return Q40SkinnyRows16<6>(a, w, acc);
    case 7:
      return Q40SkinnyRows16<7>(a, w, acc);
    default:
      return Q40SkinnyRows16<8>(a, w, acc);
  }
}

// LaneSkinny for Q4_0 on AVX3_DL: threads take contiguous ranges of 16-column groups (a partial
// last group zero-padded), all R rows one tile.
template <size_t M>
void Q40SkinnyWide(const LaneActs& acts, size_t R, size_t N, const LaneRawOut<Q40Kernel> (&outs)[M],
                   size_t ldy, const MatMulEpilogue* epi, ThreadPool& pool) {
  const size_t nb = acts.nb;
  const size_t groups = (N + kZCols - 1) / kZCols;
  pool.ParallelFor(int64_t(groups), [&](int64_t g0, int64_t g1, int) {
    for (size_t g = size_t(g0); g < size_t(g1); ++g) {
      const size_t n = g * kZCols, nc = std::min(kZCols, N - n);
      for (size_t o = 0; o < M; ++o) {
        const BlockQ4_0* w = outs[o].w;
        __m512 acc[kZSkinnyRows];
        Q40SkinnyTile16(acts, R, nc == kZCols ? w + n * nb : LanePaddedGroup(w, nb, n, nc, kZCols),
                        acc);
        const float* bn = outs[o].bias ? outs[o].bias + n : nullptr;
        for (size_t i = 0; i < R; ++i) LaneStore16(acc[i], bn, nc, outs[o].y + i * ldy + n);
      }
      LaneEpilogue(epi, 0, R, n, n + nc);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// The panel GEMM on AVX3_DL (R > 8, prefill) of every kernel with a 16-column panel (Kern::Panel16:
// Q4_0, Q8_0, Q4_K, Q5_K, Q6_K): LaneGemm's tasks (kLaneTaskRows × kLaneTaskCols, two groups of
// 16 columns a task), each group unpacked once a task into the thread's panel (Kern::Interleave16)
// and read by register tiles of 8 rows, the last 1..7 as one tile (Kern::Rows16<RT>).

// rows (1..8) activation rows from r0 against the panel of Kern (Panel16): one register tile
// (Kern::Rows16<RT>).
template <class Kern>
HWY_INLINE void WidePanelTile(const LaneActs& a, size_t r0, size_t rows,
                              const typename Kern::Panel16* panel, __m512* acc) {
  switch (rows) {
    case 1:
      return Kern::template Rows16<1>(a, r0, panel, acc);
    case 2:
      return Kern::template Rows16<2>(a, r0, panel, acc);
    case 3:
      return Kern::template Rows16<3>(a, r0, panel, acc);
    case 4:
      return Kern::template Rows16<4>(a, r0, panel, acc);
    case 5:
      return Kern::template Rows16<5>(a, r0, panel, acc);
    case 6:
      return Kern::template Rows16<6>(a, r0, panel, acc);
    case 7:
      return Kern::template Rows16<7>(a, r0, panel, acc);
    default:
      return Kern::template Rows16<8>(a, r0, panel, acc);
  }
}

// Rows [r0, r1) of one weight against its columns n .. n + nc (nc <= 16, a partial group
// zero-padded): the group unpacked into `panel` (Kern::Interleave16), then read by the register
// tiles.
template <class Kern>
HWY_INLINE void LaneWideGroup(const LaneActs& acts, size_t r0, size_t r1, size_t n, size_t nc,
                              const LaneRawOut<Kern>& out, size_t ldy,
                              typename Kern::Panel16* HWY_RESTRICT panel) {
  const size_t nb = acts.K / Kern::kBlockElems;  // weight blocks per row
  const auto* src = nc == kZCols ? out.w + n * nb : LanePaddedGroup(out.w, nb, n, nc, kZCols);
  for (size_t b = 0; b < nb; ++b) Kern::Interleave16(src, nb, b, &panel[b]);
  const float* bn = out.bias ? out.bias + n : nullptr;
  for (size_t r = r0; r < r1; r += kZTileRows) {
    const size_t rows = std::min(kZTileRows, r1 - r);
    __m512 acc[kZTileRows];
    WidePanelTile<Kern>(acts, r, rows, panel, acc);
    for (size_t i = 0; i < rows; ++i) LaneStore16(acc[i], bn, nc, out.y + (r + i) * ldy + n);
  }
}

// LaneGemm for raw weights on AVX3_DL: the same tasks, the groups through LaneWideGroup. A run of
// consecutive tasks of one thread on the same columns (the row blocks of one column block: the
// grid numbers them fastest) is done as one: each weight's 16-column groups in turn, each group
// unpacked once for all the run's rows, then epi on each task of the run. Per task the panel was
// unpacked again from the same raw rows (in cache): at 512 rows 4 times, ~10% of a Q8_0 pp512
// profile in Q80Kernel::Interleave16 against ~38% in the tiles. Per output the same operations.
template <class Kern, size_t M>
void LaneWideGemm(const LaneActs& acts, size_t R, size_t N, const LaneRawOut<Kern> (&outs)[M],
                  size_t ldy, const MatMulEpilogue* epi, ThreadPool& pool) {
  static_assert(kLaneTaskCols % kZCols == 0, "a GEMM task holds whole 16-column groups");
  const TaskGrid<kLaneTaskRows, kLaneTaskCols> tasks(R, N);
  pool.ParallelFor(int64_t(tasks.Count()), [&](int64_t t0, int64_t t1, int) {
    auto* panel = ThreadPanel<typename Kern::Panel16>(acts.K / Kern::kBlockElems);
    for (size_t t = size_t(t0); t < size_t(t1);) {
      const TaskRange first = tasks[t];
      size_t u = t + 1;  // the run [t, u): rows first.r0 .. tasks[u - 1].r1, contiguous
      while (u < size_t(t1) && tasks[u].n0 == first.n0) ++u;
      const size_t r1 = tasks[u - 1].r1;
      for (size_t n = first.n0; n < first.n1; n += kZCols) {
        const size_t nc = std::min(kZCols, first.n1 - n);
        for (size_t o = 0; o < M; ++o) {
          LaneWideGroup<Kern>(acts, first.r0, r1, n, nc, outs[o], ldy, panel);
        }
      }
      for (; t < u; ++t) {
        const TaskRange done = tasks[t];
        LaneEpilogue(epi, done.r0, done.r1, done.n0, done.n1);
      }
    }
  });
}
#endif  // HWY_AVX3_DL

// y = x · Wᵀ (+ bias) of each weight in outs for the R rows of x already quantized in `acts`
// (QuantizeLaneActs), then epi (or null) on the outputs as they are done.
template <class Kern, size_t M>
void LaneMatMulActs(const LaneActs& acts, size_t R, size_t N, const LaneRawOut<Kern> (&outs)[M],
                    size_t ldy, const MatMulEpilogue* epi, ThreadPool& pool) {
  const size_t nb = acts.K / Kern::kBlockElems;  // weight blocks per row
  if (R == 1) {
    // Each group interleaved in registers from the raw rows (a partial one zero-padded first).
    LaneGemv(N, epi, pool, [&](size_t, size_t n, size_t nc) {
      for (size_t o = 0; o < M; ++o) {
        const auto* w = outs[o].w;
        const __m256 acc =
            Kern::Gemv(acts, nc == kLaneCols ? w + n * nb : LanePaddedGroup(w, nb, n, nc), nb);
        LaneStore(acc, outs[o].bias ? outs[o].bias + n : nullptr, nc, outs[o].y + n);
      }
    });
    return;
  }
#if HWY_TARGET == HWY_AVX3_DL
  if constexpr (requires { typename Kern::Panel16; }) {  // Q4_0, Q8_0, Q4_K, Q5_K, Q6_K
    if (R > kZSkinnyRows) return LaneWideGemm<Kern>(acts, R, N, outs, ldy, epi, pool);
  }
  if constexpr (std::is_same_v<Kern, Q40Kernel>) {
    return Q40SkinnyWide(acts, R, N, outs, ldy, epi, pool);
  }
#endif
  if constexpr (requires { typename Kern::RawSrc; }) {
    if (R <= kLaneSkinnyRows) return LaneSkinny<Kern>(acts, R, N, outs, ldy, epi, pool);
  }
  LaneOut<LaneRawSource<Kern>> gemm[M];
  for (size_t o = 0; o < M; ++o) gemm[o] = {{outs[o].w, nb}, outs[o].bias, outs[o].y};
  LaneGemm<Kern>(acts, R, N, gemm, ldy, epi, pool);
}

template <class Kern>
void LaneMatMul(const float* x, size_t R, size_t K, const typename Kern::Block* w, size_t N,
                const float* bias, float* y, size_t ldy, ThreadPool& pool,
                const MatMulEpilogue* epi = nullptr) {
  const LaneRawOut<Kern> outs[1] = {{w, bias, y}};
  LaneMatMulActs<Kern>(QuantizeLaneActs<Kern>(x, R, K, pool), R, N, outs, ldy, epi, pool);
}

// ya = x · Waᵀ and yb = x · Wbᵀ (two weights of one shape, no bias) with x quantized once for
// both, in the regions of one LaneMatMul (each group of columns of wa, then of wb; epi after
// both): each output is the bits LaneMatMul gives it (the same quantized rows, the same kernels).
template <class Kern>
void LaneMatMulPair(const float* x, size_t R, size_t K, const typename Kern::Block* wa,
                    const typename Kern::Block* wb, size_t N, float* ya, float* yb, size_t ldy,
                    ThreadPool& pool, const MatMulEpilogue* epi = nullptr) {
  const LaneRawOut<Kern> outs[2] = {{wa, nullptr, ya}, {wb, nullptr, yb}};
  LaneMatMulActs<Kern>(QuantizeLaneActs<Kern>(x, R, K, pool), R, N, outs, ldy, epi, pool);
}

// ---------------------------------------------------------------------------------------------
// Repacked weights (layout in the header comment): ceil(N / 8) groups of LanePackedGroupBytes.

template <class Kern>
constexpr size_t LanePackedGroupBytes(size_t nb) {
  return nb * (Kern::PackedSrc::kQBytes + kLaneCols * sizeof(uint16_t));
}

// Group g's view: quants first, then the f16 scales.
template <class Kern>
HWY_INLINE typename Kern::PackedSrc LanePackedGroup(const uint8_t* packed, size_t nb, size_t g) {
  const uint8_t* p = packed + g * LanePackedGroupBytes<Kern>(nb);
  return typename Kern::PackedSrc{
      p, reinterpret_cast<const uint16_t*>(p + nb * Kern::PackedSrc::kQBytes)};
}

// Writes groups [g0, g1) of the N weight rows w (nb blocks each) into their place in `packed`.
template <class Kern>
void LanePackGroups(const typename Kern::Block* w, size_t N, size_t nb, size_t g0, size_t g1,
                    uint8_t* packed) {
  using Block = typename Kern::Block;
  using Panel = typename Kern::Panel;
  constexpr size_t kQBytes = Kern::PackedSrc::kQBytes;
  static_assert(sizeof(Panel::q) == kQBytes, "panel quants and repacked quants differ in size");
  std::vector<Block> pad;  // the columns of a partial last group, zero-padded to 8 rows
  for (size_t g = g0; g < g1; ++g) {
    const size_t n = g * kLaneCols, nc = std::min(kLaneCols, N - n);
    const Block* src = w + n * nb;
    if (nc < kLaneCols) {
      pad.assign(kLaneCols * nb, Block{});
      std::memcpy(static_cast<void*>(pad.data()), src, nc * nb * sizeof(Block));
      src = pad.data();
    }
    uint8_t* q = packed + g * LanePackedGroupBytes<Kern>(nb);
    uint16_t* d = reinterpret_cast<uint16_t*>(q + nb * kQBytes);
    for (size_t b = 0; b < nb; ++b) {
      alignas(32) Panel blk;
      Kern::Interleave(src, nb, b, &blk);
      std::memcpy(q + b * kQBytes, blk.q, kQBytes);
      // The f16 scales as they are (the kernels widen them exactly, as the raw path does).
      for (size_t c = 0; c < kLaneCols; ++c) {
        uint16_t h;
        std::memcpy(&h, &src[c * nb + b].d, sizeof(h));
        d[b * kLaneCols + c] = h;
      }
    }
  }
}

// Repacked weights (LanePackedMatMul): group n / 8 as it lies in memory.
template <class Kern>
struct LanePackedSource {
  const uint8_t* packed;
  size_t nb;
  LanePackedSource ForThread() const { return *this; }
  typename Kern::PackedSrc Group(size_t n, size_t) const {
    return LanePackedGroup<Kern>(packed, nb, n / kLaneCols);
  }
};

// y = x · Wᵀ (+ bias) from repacked weights: the drivers of LaneMatMul without the interleave;
// epi (or null) as in LaneMatMul.
template <class Kern>
void LanePackedMatMul(const float* x, size_t R, size_t K, const uint8_t* packed, size_t N,
                      const float* bias, float* y, size_t ldy, ThreadPool& pool,
                      const MatMulEpilogue* epi = nullptr) {
  const size_t nb = K / kQK;
  const LaneActs acts = QuantizeLaneActs<Kern>(x, R, K, pool);
  if (R == 1) {
    // The panel row kernel with one row on the group as it lies in memory.
    LaneGemv(N, epi, pool, [&](size_t g, size_t n, size_t nc) {
      __m256 acc[1];
      Kern::template Rows<1>(acts, 0, LanePackedGroup<Kern>(packed, nb, g), acc);
      LaneStore(acc[0], bias ? bias + n : nullptr, nc, y + n);
    });
    return;
  }
  const LaneOut<LanePackedSource<Kern>> outs[1] = {{{packed, nb}, bias, y}};
  LaneGemm<Kern>(acts, R, N, outs, ldy, epi, pool);
}

}  // namespace HWY_NAMESPACE
}  // namespace es::cpu
HWY_AFTER_NAMESPACE();

#endif  // x86 AVX2 and up
#endif  // ES_CPU_KERNELS_MATMUL_LANES_INL_H_ toggle
