// Column-lane kernels for Q4_K, Q5_K and Q6_K weights on x86 (AVX2 and up): the GEMV, skinny GEMM
// and panel GEMM of matmul_lanes-inl.h's drivers (LaneMatMul), with 8 weight columns side by side,
// one column per f32 lane, as Q4_0 has them. Included by matmul_quant-inl.h once per Highway
// target, after matmul_lanes-inl.h.
//
// A Q4_K block (256 elements, 144 bytes) has 8 groups of 32 with 6-bit scales sc_g and minimums
// mn_g, an f16 d and dmin (blocks.h): w = d · sc_g · q − dmin · mn_g, q the nibble (0..15). Q5_K
// (176 bytes) is the same with a fifth bit: q = nibble | bit g of qh[l] << 4 (0..31).
// Activations are quantized per group of 32 as for every other int8 type (dx_g = absmax / 127,
// xs_g = dx_g · Σ qx, matmul_quant-inl.h), so that
//   Σ_k w_k x_k ≈ Σ_g [ d · dx_g · (sc_g · Σ_{k∈g} q_k qx_k) − (dmin · mn_g) · xs_g ].
// Reduction order of output (r, n) (batch invariance; the same in GEMV, skinny GEMM, panel GEMM,
// every thread count and every AVX2+ target):
//   acc = +0;  for g = 0 … K/32 − 1 in order:
//     acc = fma(d · dx_g, float(isum_g), acc);   isum_g = sc_g · Σ q·qx, exact int32
//     acc = fma(−(dmin · mn_g), xs_g, acc);      dmin · mn_g is exact in f32 (11 × 6 bits)
//   y = acc + bias[n]
// isum_g is exact on both integer paths: AVX2 sums maddubs of the unsigned quants against 4-byte
// broadcasts of the activations in int16 (Q4_K: 8 of them, ≤ 8 · 2 · 15 · 127 = 30480; Q5_K: two
// sums of 4, ≤ 4 · 2 · 31 · 127 = 31496) and applies sc_g through madd (the scale as an int16
// pair); AVX3_DL runs vpdpbusd into int32 and multiplies by sc_g (vpmulld).
// |isum_g| ≤ 63 · 32 · 31 · 127 < 2^24, so float(isum_g) is exact too.
//
// Layout in registers (and in the GEMM panel): per block of 8 columns, the 4 chunks of 32 qs
// bytes are transposed by dwords — vector k of chunk j holds bytes 4k .. 4k + 3 of chunk j of
// column c in dword c — so that the low nibbles of chunk j are group 2j and the high ones group
// 2j + 1, element 4k + i in byte 4c + i, exactly Q4_0's lane layout (Q5_K's qh the same way: bit
// g of byte 4c + i of vector k is the fifth bit of element 4k + i of group g); the scales and
// minimums of the 8 columns are decoded once per block into vectors (sc_g per lane, dmin · mn_g
// per lane, d).

#if defined(ES_CPU_KERNELS_MATMUL_LANES_K_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ES_CPU_KERNELS_MATMUL_LANES_K_INL_H_
#undef ES_CPU_KERNELS_MATMUL_LANES_K_INL_H_
#else
#define ES_CPU_KERNELS_MATMUL_LANES_K_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "edgeseek/internal/quant/blocks.h"
#include "hwy/highway.h"

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#include <immintrin.h>

HWY_BEFORE_NAMESPACE();
namespace es::cpu {
namespace HWY_NAMESPACE {

// The per-block scalars of 8 Q4_K / Q5_K columns as lanes.
struct Q4KScales {
  // Group g's scale sc_g of column c in int32 lane c: as (sc_g, sc_g) int16 pairs for madd on
  // AVX2, as int32 for vpmulld on AVX3_DL (the same isum either way).
  __m256i sc[8];
  __m256 fm[8];  // dmin · mn_g of column c
  __m256 d;      // d of column c
};

// Q5_K: the weight block has fifth bits (qh).
template <class Block>
inline constexpr bool kFifthBit = std::is_same_v<Block, BlockQ5_K>;

// One block of 8 interleaved columns, as the GEMM panel stores it (Q4_K 1600 bytes, Q5_K 1824).
template <class Block>
struct QKx8 {
  __m256i q[32];  // q[8j + k]: dword c = bytes 4k .. 4k + 3 of qs chunk j (qs[32j ..]) of column c
  __m256i h[kFifthBit<Block> ? 8 : 1];  // Q5_K: h[k] dword c = qh[4k .. 4k + 3] of column c
  Q4KScales s;
};

// The 4 dwords at byte offset `off` of the blocks p + c · stride (c = 0..7), transposed: out[k]
// dword c = dword k of column c's 16 bytes (rows c and c + 4 in the two halves, then a 4×4 dword
// transpose per half, as InterleaveQ40).
template <class Block>
HWY_INLINE void TransposeQuads(const Block* HWY_RESTRICT p, size_t stride, size_t off,
                               __m256i* HWY_RESTRICT out) {
  auto load = [&](size_t c) {
    return _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(reinterpret_cast<const uint8_t*>(p + c * stride) + off));
  };
  const __m256i a0 = _mm256_inserti128_si256(_mm256_castsi128_si256(load(0)), load(4), 1);
  const __m256i a1 = _mm256_inserti128_si256(_mm256_castsi128_si256(load(1)), load(5), 1);
  const __m256i a2 = _mm256_inserti128_si256(_mm256_castsi128_si256(load(2)), load(6), 1);
  const __m256i a3 = _mm256_inserti128_si256(_mm256_castsi128_si256(load(3)), load(7), 1);
  const __m256i t0 = _mm256_unpacklo_epi32(a0, a1), t1 = _mm256_unpackhi_epi32(a0, a1);
  const __m256i t2 = _mm256_unpacklo_epi32(a2, a3), t3 = _mm256_unpackhi_epi32(a2, a3);
  out[0] = _mm256_unpacklo_epi64(t0, t2);
  out[1] = _mm256_unpackhi_epi64(t0, t2);
  out[2] = _mm256_unpacklo_epi64(t1, t3);
  out[3] = _mm256_unpackhi_epi64(t1, t3);
}

// The 32 bytes at offset `off` of block b of the 8 rows, transposed into q[0..7].
template <class Block>
HWY_INLINE void Transpose32(const Block* HWY_RESTRICT w, size_t stride, size_t b, size_t off,
                            __m256i* HWY_RESTRICT q) {
  TransposeQuads(w + b, stride, off, q);
  TransposeQuads(w + b, stride, off + 16, q + 4);
}
// Chunk j (qs[32j .. 32j + 31]) of block b of the 8 rows, transposed into q[0..7].
template <class Block>
HWY_INLINE void InterleaveQKChunk(const Block* HWY_RESTRICT w, size_t stride, size_t b, size_t j,
                                  __m256i* HWY_RESTRICT q) {
  Transpose32(w, stride, b, offsetof(Block, qs) + 32 * j, q);
}

// f16 values in the low 16 bits of 8 int32 lanes, as f32.
HWY_INLINE __m256 LowHalvesToF32(__m256i v) {
  return _mm256_cvtph_ps(
      _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

// The scalars of block b of 8 Q4_K / Q5_K columns as read (both start with d, dmin, scales[12]):
// d and dmin as f32 lanes and the three transposed dwords of scales[12]; group g's scale and
// minimum are unpacked from them where they are used (UnpackScaleMinK4, lane-wise), so the GEMV
// keeps them in registers rather than as 16 vectors on the stack.
struct QKRawScales {
  __m256i s0, s1, s2;  // dword c = scales[0..3], scales[4..7], scales[8..11] of column c
  __m256 d, dmin;

  template <int g>
  HWY_INLINE __m256i Sc() const {  // sc_g: int32 on AVX3_DL, (sc_g, sc_g) int16 pairs on AVX2
    __m256i sc;
    if constexpr (g < 4) {
      sc = Bits(s0, 8 * g, 63);
    } else {
      sc = _mm256_or_si256(Bits(s2, 8 * (g - 4), 15),
                           _mm256_slli_epi32(Bits(s0, 8 * (g - 4) + 6, 3), 4));
    }
#if HWY_TARGET == HWY_AVX3_DL
    return sc;
#else
    return _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16));
#endif
  }
  template <int g>
  HWY_INLINE __m256 Fm() const {  // dmin · mn_g (exact: 11 × 6 bits)
    __m256i mn;
    if constexpr (g < 4) {
      mn = Bits(s1, 8 * g, 63);
    } else {
      mn = _mm256_or_si256(Bits(s2, 8 * (g - 4) + 4, 15),
                           _mm256_slli_epi32(Bits(s1, 8 * (g - 4) + 6, 3), 4));
    }
    return _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(mn));
  }
  HWY_INLINE __m256 D() const { return d; }

 private:
  static HWY_INLINE __m256i Bits(__m256i v, int shift, int mask) {
    return _mm256_and_si256(_mm256_srli_epi32(v, shift), _mm256_set1_epi32(mask));
  }
};

template <class Block>
HWY_INLINE QKRawScales ReadQKScales(const Block* HWY_RESTRICT w, size_t stride, size_t b) {
  static_assert(offsetof(Block, scales) == 4, "d, dmin, scales[12] first");
  __m256i h[4];  // dwords of d | dmin << 16, scales[0..3], scales[4..7], scales[8..11]
  TransposeQuads(w + b, stride, 0, h);
  QKRawScales s;
  s.s0 = h[1];
  s.s1 = h[2];
  s.s2 = h[3];
  s.d = LowHalvesToF32(_mm256_and_si256(h[0], _mm256_set1_epi32(0xFFFF)));
  s.dmin = LowHalvesToF32(_mm256_srli_epi32(h[0], 16));
  return s;
}

// All 8 groups unpacked, as the GEMM panel stores them (the same values as QKRawScales gives).
template <int... g>
HWY_INLINE void UnpackQKScales(const QKRawScales& r, Q4KScales* HWY_RESTRICT s,
                               std::integer_sequence<int, g...>) {
  s->d = r.D();
  ((s->sc[g] = r.Sc<g>(), s->fm[g] = r.Fm<g>()), ...);
}
template <class Block>
HWY_INLINE void DecodeQKScales(const Block* HWY_RESTRICT w, size_t stride, size_t b,
                               Q4KScales* HWY_RESTRICT s) {
  UnpackQKScales(ReadQKScales(w, stride, b), s, std::make_integer_sequence<int, 8>{});
}

template <class Block>
HWY_INLINE void InterleaveQK(const Block* HWY_RESTRICT w, size_t stride, size_t b,
                             QKx8<Block>* HWY_RESTRICT out) {
  for (size_t j = 0; j < 4; ++j) InterleaveQKChunk(w, stride, b, j, out->q + 8 * j);
  if constexpr (kFifthBit<Block>) Transpose32(w, stride, b, offsetof(Block, qh), out->h);
  DecodeQKScales(w, stride, b, &out->s);
}

#if HWY_TARGET == HWY_AVX3_DL
// A group's 32 int8 x against its quants n(0..7) (as QKRow takes them), lane-wise with VNNI:
// lo sums the first 16 (n(0..3)), hi the last 16 (n(4..7)); QKRow and Q6KIsum scale them.
template <class Quants>
HWY_INLINE void DpHalves(const Quants& n, const int8_t* HWY_RESTRICT x,
                         __m256i* HWY_RESTRICT lo_out, __m256i* HWY_RESTRICT hi_out) {
  __m256i lo = LaneDpBusd(_mm256_setzero_si256(), n(0), Bcast4(x));
  __m256i hi = LaneDpBusd(_mm256_setzero_si256(), n(4), Bcast4(x + 16));
  lo = LaneDpBusd(lo, n(1), Bcast4(x + 4));
  hi = LaneDpBusd(hi, n(5), Bcast4(x + 20));
  lo = LaneDpBusd(lo, n(2), Bcast4(x + 8));
  hi = LaneDpBusd(hi, n(6), Bcast4(x + 24));
  lo = LaneDpBusd(lo, n(3), Bcast4(x + 12));
  hi = LaneDpBusd(hi, n(7), Bcast4(x + 28));
  *lo_out = lo;
  *hi_out = hi;
}
#endif

// One group of one activation row: acc (lane c = column c) += d · dx · isum − fm · xs.
//   n(k), k = 0..7: the group's quants (Q4_K 0..15, Q5_K 0..31), element 4k + i of column c in
//   byte 4c + i of n(k); x: the row's 32 int8 quants of the group; dx, xs: its scale and dx · Σ
//   quants.
template <bool kFifth, class Quants>
HWY_INLINE __m256 QKRow(const Quants& n, __m256i sc, __m256 fm, __m256 d,
                        const int8_t* HWY_RESTRICT x, float dx, float xs, __m256 acc) {
#if HWY_TARGET == HWY_AVX3_DL
  __m256i lo, hi;
  DpHalves(n, x, &lo, &hi);
  const __m256i isum = _mm256_mullo_epi32(_mm256_add_epi32(lo, hi), sc);
#else
  __m256i p = _mm256_maddubs_epi16(n(0), Bcast4(x));
  p = _mm256_add_epi16(p, _mm256_maddubs_epi16(n(1), Bcast4(x + 4)));
  p = _mm256_add_epi16(p, _mm256_maddubs_epi16(n(2), Bcast4(x + 8)));
  p = _mm256_add_epi16(p, _mm256_maddubs_epi16(n(3), Bcast4(x + 12)));
  __m256i p2 = _mm256_maddubs_epi16(n(4), Bcast4(x + 16));
  p2 = _mm256_add_epi16(p2, _mm256_maddubs_epi16(n(5), Bcast4(x + 20)));
  p2 = _mm256_add_epi16(p2, _mm256_maddubs_epi16(n(6), Bcast4(x + 24)));
  p2 = _mm256_add_epi16(p2, _mm256_maddubs_epi16(n(7), Bcast4(x + 28)));
  __m256i isum;
  if constexpr (kFifth) {  // two int16 sums of at most 31496 each
    isum = _mm256_add_epi32(_mm256_madd_epi16(p, sc), _mm256_madd_epi16(p2, sc));
  } else {  // one of at most 30480
    isum = _mm256_madd_epi16(_mm256_add_epi16(p, p2), sc);
  }
#endif
  acc = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(isum), acc);
  return _mm256_fnmadd_ps(fm, _mm256_set1_ps(xs), acc);
}

// Where the row kernel reads block b of 8 columns from:
//   Prefetch(b); Scales(b) → an object with Sc<g>(), Fm<g>(), D() (as QKRawScales);
//   Chunk(b, j, q) → q[0..7] of chunk j; High(b, h) → Q5_K's h[0..7].
// The GEMM's per-task panel (written by this thread just before):
struct QKPanelScales {
  const Q4KScales* HWY_RESTRICT s;
  template <int g>
  HWY_INLINE __m256i Sc() const {
    return s->sc[g];
  }
  template <int g>
  HWY_INLINE __m256 Fm() const {
    return s->fm[g];
  }
  HWY_INLINE __m256 D() const { return s->d; }
};
template <class Block>
struct QKPanelSrc {
  const QKx8<Block>* HWY_RESTRICT p;
  HWY_INLINE void Prefetch(size_t) const {}
  HWY_INLINE QKPanelScales Scales(size_t b) const { return {&p[b].s}; }
  HWY_INLINE void Chunk(size_t b, size_t j, __m256i* q) const {
#pragma GCC unroll 8
    for (size_t k = 0; k < 8; ++k) q[k] = _mm256_load_si256(&p[b].q[8 * j + k]);
  }
  HWY_INLINE void High(size_t b, __m256i* h) const {
#pragma GCC unroll 8
    for (size_t k = 0; k < 8; ++k) h[k] = _mm256_load_si256(&p[b].h[k]);
  }
};
// Raw rows (GEMV and skinny GEMM): each block transposed in registers as it is read, with the
// next 8 rows fetched at the pace these are consumed (PrefetchNextGroup).
template <class Block>
struct QKRawSrc {
  const Block* HWY_RESTRICT w;  // 8 rows of nb blocks (row stride nb)
  size_t nb;
  HWY_INLINE void Prefetch(size_t b) const {
    PrefetchNextGroup(w, nb * sizeof(Block), b, kLaneCols * sizeof(Block));
  }
  HWY_INLINE QKRawScales Scales(size_t b) const { return ReadQKScales(w, nb, b); }
  HWY_INLINE void Chunk(size_t b, size_t j, __m256i* q) const { InterleaveQKChunk(w, nb, b, j, q); }
  HWY_INLINE void High(size_t b, __m256i* h) const {
    Transpose32(w, nb, b, offsetof(Block, qh), h);
  }
};

// Q5_K: bit g of each byte of h moved to bit 4 (16-bit shifts: the single bit left after the mask
// stays inside its byte).
template <int g>
HWY_INLINE __m256i FifthBit(__m256i h) {
  const __m256i bit = _mm256_and_si256(h, _mm256_set1_epi8(char(1 << g)));
  if constexpr (g <= 4) return _mm256_slli_epi16(bit, 4 - g);
  return _mm256_srli_epi16(bit, g - 4);
}

// RT activation rows (r0 ..) against one group of 8 columns; named accumulators so that they
// stay in registers. RT = 1 on raw rows is the GEMV. Every loop over k is unrolled and every
// group index a constant: rolled (GCC's -O2), the chunk's quants, nibbles and the block's scales
// went through the stack — 2 stores and 3 loads a vector — and the Q4_K GEMV read at 82% of the
// Q4_0 one's GB/s.
template <class Block, int RT, class Src>
HWY_NOINLINE void QKPanelRows(const LaneActs& a, size_t r0, Src src, __m256* acc_out) {
  static_assert(RT >= 1 && RT <= 4, "QKPanelRows handles 1..4 rows");
  constexpr bool kFifth = kFifthBit<Block>;
  const size_t K = a.K, ng = a.nb;                 // ng: groups of 32 per row
  const size_t nb = K / kQKK;                      // weight blocks per row
  const int8_t* HWY_RESTRICT x = a.q8() + r0 * K;  // row r at x + r · K
  const float* HWY_RESTRICT d = a.d + r0 * ng;     // row r at d + r · ng
  const float* HWY_RESTRICT s = a.s + r0 * ng;
  const __m256i m = _mm256_set1_epi8(0x0F);
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
  for (size_t b = 0; b < nb; ++b) {
    src.Prefetch(b);
    const auto sb = src.Scales(b);
    const __m256 dw = sb.D();
    __m256i qh[kFifth ? 8 : 1];
    if constexpr (kFifth) src.High(b, qh);
    // Group 2j + h of the block: the low (h = 0) or high nibbles of chunk j; constants for
    // FifthBit's shifts and the scale unpack.
    auto group = [&]<int j, int h>(const __m256i* q) __attribute__((always_inline)) {
      constexpr int gb = 2 * j + h;
      auto unpack = [&](int k) __attribute__((always_inline)) {
        const __m256i nib = _mm256_and_si256(h ? _mm256_srli_epi16(q[k], 4) : q[k], m);
        if constexpr (kFifth) return _mm256_or_si256(nib, FifthBit<gb>(qh[k]));
        return nib;
      };
      // One row: each vector unpacked where it is used (fewer live registers, AVX2's 16);
      // several: unpacked once for all of them.
      __m256i nv[8];
      if constexpr (RT > 1) {
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) nv[k] = unpack(k);
      }
      auto n = [&](int k) __attribute__((always_inline)) {
        if constexpr (RT > 1) return nv[k];
        return unpack(k);
      };
      const size_t g = 8 * b + gb;  // group of the row
      const __m256i sc = sb.template Sc<gb>();
      const __m256 fm = sb.template Fm<gb>();
      const int8_t* xg = x + g * kQK;
      c0 = QKRow<kFifth>(n, sc, fm, dw, xg, d[g], s[g], c0);
      if constexpr (RT > 1) c1 = QKRow<kFifth>(n, sc, fm, dw, xg + K, d[ng + g], s[ng + g], c1);
      if constexpr (RT > 2)
        c2 = QKRow<kFifth>(n, sc, fm, dw, xg + 2 * K, d[2 * ng + g], s[2 * ng + g], c2);
      if constexpr (RT > 3)
        c3 = QKRow<kFifth>(n, sc, fm, dw, xg + 3 * K, d[3 * ng + g], s[3 * ng + g], c3);
    };
    auto chunk = [&]<int j>() __attribute__((always_inline)) {
      __m256i q[8];
      src.Chunk(b, j, q);
      group.template operator()<j, 0>(q);
      group.template operator()<j, 1>(q);
    };
    chunk.template operator()<0>();
    chunk.template operator()<1>();
    chunk.template operator()<2>();
    chunk.template operator()<3>();
  }
  acc_out[0] = c0;
  if constexpr (RT > 1) acc_out[1] = c1;
  if constexpr (RT > 2) acc_out[2] = c2;
  if constexpr (RT > 3) acc_out[3] = c3;
}
#if HWY_TARGET == HWY_AVX3_DL
// ---------------------------------------------------------------------------------------------
// K-quant prefill GEMM on AVX3_DL (R > 8, LaneWideGemm; Q4_K and Q5_K here, Q6_K's panel and tile
// below): Q4_0's wide scheme (matmul_lanes-inl.h) for the K-quants. LaneGemm's tasks
// (kLaneTaskRows × kLaneTaskCols: two groups of 16 columns a task); each group of 16 columns (the
// 8-column layout above with four 128-bit lanes: lane L holds columns 4L .. 4L + 3) is interleaved
// and unpacked once per task into the thread's panel
// ([nb] QKx16: the quants as bytes ready for vpdpbusd, the 8 groups' scales and dmin · mn_g as
// lanes), then read by register tiles of 8 rows (the last 1..7 as one tile). A row and group:
// 8 zmm vpdpbusd in one chain, the activations broadcast by the instruction ({1to16}), one
// vpmulld by sc_g, then QKRow's float operations (cvt, mul, fma, fnmadd) — for 16 columns, where
// the 8-column 4-row tile of QKPanelRows spent 8 ymm vpdpbusd, an add and a vpmulld on 8 and
// unpacked the nibbles in every tile. The integer sums are exact (the same isum_g in another
// order) and the float operations QKRow's, so every output bit is the 8-column kernels'.

// One block of 16 columns, unpacked, as the wide GEMM's panel holds it (5184 bytes).
struct QKx16 {
  __m512i q[64];  // q[8g + k]: dword c = the quants (Q4_K 0..15, Q5_K 0..31) of elements
                  // 4k .. 4k + 3 of group g of column c, one a byte
  __m512i sc[8];  // sc_g of column c, int32
  __m512 fm[8];   // dmin · mn_g of column c
  __m512 d;       // d of column c
};
static_assert(sizeof(QKx16) == 5184, "QKx16: 81 zmm");

// TransposeQuads for 16 columns (p + c · stride, c = 0..15): out[k] dword c = dword k of the 16
// bytes at offset `off` of column c (rows c, c + 4, c + 8, c + 12 in the four 128-bit lanes,
// then the 4×4 dword transpose per lane).
template <class Block>
HWY_INLINE void TransposeQuads16(const Block* HWY_RESTRICT p, size_t stride, size_t off,
                                 __m512i* HWY_RESTRICT out) {
  auto load = [&](size_t c) {
    return _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(reinterpret_cast<const uint8_t*>(p + c * stride) + off));
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
  out[0] = _mm512_unpacklo_epi64(t0, t2);
  out[1] = _mm512_unpackhi_epi64(t0, t2);
  out[2] = _mm512_unpacklo_epi64(t1, t3);
  out[3] = _mm512_unpackhi_epi64(t1, t3);
}

// (v >> shift) & mask per int32 lane.
HWY_INLINE __m512i ZBits(__m512i v, int shift, int mask) {
  return _mm512_and_si512(_mm512_srli_epi32(v, shift), _mm512_set1_epi32(mask));
}

// Group g's scale and dmin · mn_g of 16 columns from the transposed scales[12] dwords s0, s1, s2
// (QKRawScales::Sc / Fm in 16 lanes: the same integers and the same product).
template <int g>
HWY_INLINE void QKScales16(__m512i s0, __m512i s1, __m512i s2, __m512 dmin,
                           QKx16* HWY_RESTRICT out) {
  __m512i sc, mn;
  if constexpr (g < 4) {
    sc = ZBits(s0, 8 * g, 63);
    mn = ZBits(s1, 8 * g, 63);
  } else {
    sc = _mm512_or_si512(ZBits(s2, 8 * (g - 4), 15),
                         _mm512_slli_epi32(ZBits(s0, 8 * (g - 4) + 6, 3), 4));
    mn = _mm512_or_si512(ZBits(s2, 8 * (g - 4) + 4, 15),
                         _mm512_slli_epi32(ZBits(s1, 8 * (g - 4) + 6, 3), 4));
  }
  out->sc[g] = sc;
  out->fm[g] = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn));
}

template <int... g>
HWY_INLINE void QKScales16(__m512i s0, __m512i s1, __m512i s2, __m512 dmin, QKx16* HWY_RESTRICT out,
                           std::integer_sequence<int, g...>) {
  (QKScales16<g>(s0, s1, s2, dmin, out), ...);
}

// FifthBit in 16 lanes: bit g of each byte of h moved to bit 4.
template <int g>
HWY_INLINE __m512i FifthBit16(__m512i h) {
  const __m512i bit = _mm512_and_si512(h, _mm512_set1_epi8(char(1 << g)));
  if constexpr (g <= 4) return _mm512_slli_epi16(bit, 4 - g);
  return _mm512_srli_epi16(bit, g - 4);
}

// Block b of the 16 rows w + c · stride, unpacked into out.
template <class Block>
HWY_INLINE void InterleaveQK16(const Block* HWY_RESTRICT w, size_t stride, size_t b,
                               QKx16* HWY_RESTRICT out) {
  const Block* p = w + b;
  const __m512i m = _mm512_set1_epi8(0x0F);
  __m512i qh[8];  // Q5_K: as q, bit g of byte 4c + i of qh[k] the fifth bit of group g
  if constexpr (kFifthBit<Block>) {
    TransposeQuads16(p, stride, offsetof(Block, qh), qh);
    TransposeQuads16(p, stride, offsetof(Block, qh) + 16, qh + 4);
  }
  auto chunk = [&]<int j>() __attribute__((always_inline)) {  // groups 2j (low), 2j + 1 (high)
    __m512i q[8];
    TransposeQuads16(p, stride, offsetof(Block, qs) + 32 * j, q);
    TransposeQuads16(p, stride, offsetof(Block, qs) + 32 * j + 16, q + 4);
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      __m512i lo = _mm512_and_si512(q[k], m);
      __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q[k], 4), m);
      if constexpr (kFifthBit<Block>) {
        lo = _mm512_or_si512(lo, FifthBit16<2 * j>(qh[k]));
        hi = _mm512_or_si512(hi, FifthBit16<2 * j + 1>(qh[k]));
      }
      out->q[8 * (2 * j) + k] = lo;
      out->q[8 * (2 * j + 1) + k] = hi;
    }
  };
  chunk.template operator()<0>();
  chunk.template operator()<1>();
  chunk.template operator()<2>();
  chunk.template operator()<3>();
  static_assert(offsetof(Block, scales) == 4, "d, dmin, scales[12] first");
  __m512i h[4];  // dwords of d | dmin << 16, scales[0..3], scales[4..7], scales[8..11]
  TransposeQuads16(p, stride, 0, h);
  out->d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h[0]));
  const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h[0], 16)));
  QKScales16(h[1], h[2], h[3], dmin, out, std::make_integer_sequence<int, 8>{});
}

// RT activation rows (r0 ..) against the panel [nb] of 16 unpacked columns; named accumulators
// (an array of them went through the stack, as in Q40PanelRows16); one tile of LaneWideGemm.
template <int RT>
HWY_NOINLINE void QKPanelRows16(const LaneActs& a, size_t r0, const QKx16* HWY_RESTRICT panel,
                                __m512* acc_out) {
  static_assert(RT >= 1 && RT <= int(kZTileRows), "QKPanelRows16 handles 1..8 rows");
  const size_t K = a.K, ng = a.nb;                 // ng: groups of 32 per row
  const size_t nb = K / kQKK;                      // weight blocks per row
  const int8_t* HWY_RESTRICT x = a.q8() + r0 * K;  // row r at x + r · K
  const float* HWY_RESTRICT d = a.d + r0 * ng;     // row r at d + r · ng
  const float* HWY_RESTRICT s = a.s + r0 * ng;
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
  for (size_t b = 0; b < nb; ++b) {
    const QKx16& p = panel[b];
    const __m512 dw = p.d;
#pragma GCC unroll 8
    for (size_t gb = 0; gb < 8; ++gb) {
      const __m512i* n = p.q + 8 * gb;
      const __m512i n0 = n[0], n1 = n[1], n2 = n[2], n3 = n[3];
      const __m512i n4 = n[4], n5 = n[5], n6 = n[6], n7 = n[7];
      const __m512i sc = p.sc[gb];
      const __m512 fm = p.fm[gb];
      const size_t g = 8 * b + gb;  // group of the row
      const int8_t* xg = x + g * kQK;
      auto row = [&](size_t r, __m512& c) {
        const int8_t* xr = xg + r * K;
        __m512i i = ZDpBusdBcast(_mm512_setzero_si512(), n0, xr);
        i = ZDpBusdBcast(i, n1, xr + 4);
        i = ZDpBusdBcast(i, n2, xr + 8);
        i = ZDpBusdBcast(i, n3, xr + 12);
        i = ZDpBusdBcast(i, n4, xr + 16);
        i = ZDpBusdBcast(i, n5, xr + 20);
        i = ZDpBusdBcast(i, n6, xr + 24);
        i = ZDpBusdBcast(i, n7, xr + 28);
        const __m512i isum = _mm512_mullo_epi32(i, sc);
        c = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(d[r * ng + g])),
                            _mm512_cvtepi32_ps(isum), c);
        c = _mm512_fnmadd_ps(fm, _mm512_set1_ps(s[r * ng + g]), c);
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
  }
  const __m512 c[kZTileRows] = {c0, c1, c2, c3, c4, c5, c6, c7};
  for (int r = 0; r < RT; ++r) acc_out[r] = c[r];
}
#endif  // HWY_AVX3_DL

// Q4_K and Q5_K (BlockT) for LaneMatMul.
template <class BlockT>
struct QKKernel {
  using Block = BlockT;
  using Panel = QKx8<Block>;
  using XQ = int8_t;
  static constexpr size_t kBlockElems = kQKK;
  static void Quantize(const float* x, size_t K, int8_t* q, float* d, int32_t* off, float* s) {
#if HWY_TARGET == HWY_AVX3_DL
    QuantizeQ40RowZ(x, K, q, d, off, s);  // QuantizeActivationRow's bytes and floats (off unused)
#else
    (void)off;
    QuantizeActivationRow(x, int64_t(K), q, d, s);
#endif
  }
#if HWY_TARGET == HWY_AVX3_DL
  // The prefill GEMM's (LaneWideGemm, R > kZSkinnyRows).
  using Panel16 = QKx16;
  static void Interleave16(const Block* w, size_t stride, size_t b, QKx16* out) {
    InterleaveQK16(w, stride, b, out);
  }
  template <int RT>
  static void Rows16(const LaneActs& a, size_t r0, const QKx16* panel, __m512* acc) {
    QKPanelRows16<RT>(a, r0, panel, acc);
  }
#endif
  static __m256 Gemv(const LaneActs& a, const Block* w, size_t nb) {
    __m256 acc[1];
    QKPanelRows<Block, 1>(a, 0, QKRawSrc<Block>{w, nb}, acc);
    return acc[0];
  }
  static void Interleave(const Block* w, size_t stride, size_t b, Panel* out) {
    InterleaveQK(w, stride, b, out);
  }
  using PanelSrc = QKPanelSrc<Block>;
  using RawSrc = QKRawSrc<Block>;  // the skinny GEMM's (LaneSkinny)
  template <int RT, class Src>
  static void Rows(const LaneActs& a, size_t r0, Src src, __m256* acc) {
    QKPanelRows<Block, RT>(a, r0, src, acc);
  }
};
using Q4KKernel = QKKernel<BlockQ4_K>;
using Q5KKernel = QKKernel<BlockQ5_K>;

// ---------------------------------------------------------------------------------------------
// Q6_K (attn_v and the lm_head of Q4_K_M files). A block (256 elements, 210 bytes) has 8 groups
// of 32 (group g = 4h + gg: the 4 low bits from ql[64h + 32(gg & 1) ..], low nibbles for gg < 2,
// high ones for gg >= 2; the 2 high bits from qh[32h ..] at bit 2gg), signed 8-bit sub-scales per
// 16 elements (sA = scales[2g] for elements 0..15 of group g, sB = scales[2g + 1] for 16..31) and
// an f16 d: w = d · s · (q − 32), q = 0..63. With the activations' per-half sums Σlo, Σhi
// (QuantizeQ6KActs, an int16 pair a group):
//   isum_g = sA · Σ_{k<16} q_k qx_k + sB · Σ_{k>=16} q_k qx_k − 32 · (sA · Σlo + sB · Σhi),
// exact in int32 (|isum_g| ≤ 32 · 32 · 127 · 128 < 2^24, so its float is exact too). AVX2 sums
// maddubs of the unsigned q (0..63) against 4-byte broadcasts of the activations in pairs
// (2 · 2 · 63 · 127 = 32004 ≤ 32767) and applies the scales through madd (int16 pairs (s, s));
// AVX3_DL runs vpdpbusd per half and vpmulld by the scale; the offset is one madd of (32 sA,
// 32 sB) against the pair (Σlo, Σhi) on both.
// Reduction order of output (r, n), GEMV, skinny GEMM and panel GEMM, every AVX2+ target:
//   acc = +0;  for g in order: acc = fma(d · dx_g, float(isum_g), acc);  y = acc + bias[n]

// The sub-scales of 8 Q6_K columns, lanes as in Q4KScales.
struct Q6KScales {
  // Group g's sA and sB of column c in lane c: (s, s) int16 pairs for madd on AVX2, int32 for
  // vpmulld on AVX3_DL.
  __m256i sa[8], sb[8];
  __m256i off[8];  // (32 sA, 32 sB) int16 pair of column c
  __m256 d;        // d of column c
};

// One block of 8 columns fully decoded, as the GEMM panel stores it (2848 bytes): the panel is
// read by every 4-row tile of a task, so the 6-bit quants are assembled once per task.
struct Q6Kx8 {
  __m256i q[64];  // q[8g + k]: dword c = q (0..63) of elements 4k .. 4k + 3 of group g, column c
  Q6KScales s;
};

// Element vector k of group 4h + e (hi = false: the low nibbles of ql chunk 2h + e, qh bits 2e)
// or 4h + 2 + e (hi: the high nibbles, bits 4 + 2e): the 6-bit q (0..63) of each byte, from the
// transposed ql_k and qh_k. The 2 high bits go to bits 4..5 (16-bit shifts; the mask drops what
// crossed).
template <int e, bool hi>
HWY_INLINE __m256i Q6KQuants(__m256i ql, __m256i qh) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
  __m256i h;
  if constexpr (hi) {
    h = e ? _mm256_srli_epi16(qh, 2) : qh;
    ql = _mm256_srli_epi16(ql, 4);
  } else {
    h = e ? _mm256_slli_epi16(qh, 2) : _mm256_slli_epi16(qh, 4);
  }
  return _mm256_or_si256(_mm256_and_si256(ql, m4), _mm256_and_si256(h, m2));
}

// The sub-scales of a group with odd (g & 1): from v = the transposed scales[4 (g / 2) ..] dwords,
// bytes 2(g & 1) and 2(g & 1) + 1 sign-extended: sA, sB (int32 lanes on AVX3_DL, (s, s) int16
// pairs for madd on AVX2) and the offset pair (32 sA, 32 sB).
template <bool odd>
HWY_INLINE void Q6KGroupScales(__m256i v, __m256i* HWY_RESTRICT sa_out,
                               __m256i* HWY_RESTRICT sb_out, __m256i* HWY_RESTRICT off) {
  const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
  const __m256i ev = _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8);  // bytes 0, 2
  const __m256i od = _mm256_srai_epi16(v, 8);                        // bytes 1, 3
  const __m256i sa =
      odd ? _mm256_srai_epi32(ev, 16) : _mm256_srai_epi32(_mm256_slli_epi32(ev, 16), 16);
  const __m256i sb =
      odd ? _mm256_srai_epi32(od, 16) : _mm256_srai_epi32(_mm256_slli_epi32(od, 16), 16);
#if HWY_TARGET == HWY_AVX3_DL
  *sa_out = sa;
  *sb_out = sb;
#else
  *sa_out = _mm256_or_si256(_mm256_and_si256(sa, lo16), _mm256_slli_epi32(sa, 16));
  *sb_out = _mm256_or_si256(_mm256_and_si256(sb, lo16), _mm256_slli_epi32(sb, 16));
#endif
  *off =
      _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi32(sa, 5), lo16), _mm256_slli_epi32(sb, 21));
}

// Block b of the 8 rows w + c · stride decoded into out.
HWY_INLINE void InterleaveQ6K(const BlockQ6_K* HWY_RESTRICT w, size_t stride, size_t b,
                              Q6Kx8* HWY_RESTRICT out) {
  auto half = [&]<int h>() __attribute__((always_inline)) {
    __m256i qh[8];
    Transpose32(w, stride, b, offsetof(BlockQ6_K, qh) + 32 * h, qh);
    auto chunk = [&]<int e>() __attribute__((always_inline)) {
      __m256i ql[8];
      Transpose32(w, stride, b, offsetof(BlockQ6_K, ql) + 64 * h + 32 * e, ql);
      __m256i* lo = out->q + 8 * (4 * h + e);      // group 4h + e
      __m256i* hi = out->q + 8 * (4 * h + 2 + e);  // group 4h + 2 + e
      for (size_t k = 0; k < 8; ++k) {
        lo[k] = Q6KQuants<e, false>(ql[k], qh[k]);
        hi[k] = Q6KQuants<e, true>(ql[k], qh[k]);
      }
    };
    chunk.template operator()<0>();
    chunk.template operator()<1>();
  };
  half.template operator()<0>();
  half.template operator()<1>();
  // Scales: v[j] dword c = scales[4j .. 4j + 3] of column c; group g's pair is in v[g / 2].
  __m256i v[4];
  TransposeQuads(w + b, stride, offsetof(BlockQ6_K, scales), v);
  for (int j = 0; j < 4; ++j) {
    Q6KGroupScales<false>(v[j], &out->s.sa[2 * j], &out->s.sb[2 * j], &out->s.off[2 * j]);
    Q6KGroupScales<true>(v[j], &out->s.sa[2 * j + 1], &out->s.sb[2 * j + 1],
                         &out->s.off[2 * j + 1]);
  }
  out->s.d = LaneScales(w + b, stride);
}

// The exact isum_g of one group of one activation row (lane c = column c).
//   n(k), k = 0..7: the group's q (0..63) as in Q6Kx8; sa, sb, off: its sub-scales
//   (Q6KGroupScales); x: the row's 32 int8 quants of the group; sums: (Σ x[0..15], Σ x[16..31])
//   as an int16 pair.
template <class Quants>
HWY_INLINE __m256i Q6KIsum(const Quants& n, __m256i sa, __m256i sb, __m256i off,
                           const int8_t* HWY_RESTRICT x, int32_t sums) {
#if HWY_TARGET == HWY_AVX3_DL
  __m256i lo, hi;
  DpHalves(n, x, &lo, &hi);
  const __m256i isum = _mm256_add_epi32(_mm256_mullo_epi32(lo, sa), _mm256_mullo_epi32(hi, sb));
#else
  auto pair = [&](int k) __attribute__((always_inline)) {  // two maddubs in int16: ≤ 32004
    return _mm256_add_epi16(_mm256_maddubs_epi16(n(k), Bcast4(x + 4 * k)),
                            _mm256_maddubs_epi16(n(k + 1), Bcast4(x + 4 * k + 4)));
  };
  const __m256i isum = _mm256_add_epi32(
      _mm256_add_epi32(_mm256_madd_epi16(pair(0), sa), _mm256_madd_epi16(pair(2), sa)),
      _mm256_add_epi32(_mm256_madd_epi16(pair(4), sb), _mm256_madd_epi16(pair(6), sb)));
#endif
  return _mm256_sub_epi32(isum, _mm256_madd_epi16(off, _mm256_set1_epi32(sums)));
}

// acc (lane c = column c) += d · dx · isum_g: the one float operation of a group.
HWY_INLINE __m256 Q6KAccumulate(__m256 d, float dx, __m256i isum, __m256 acc) {
  return _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(isum), acc);
}

// One group of one activation row from a decoded block: acc += d · dx · isum_g (g: the group
// within the block).
HWY_INLINE __m256 Q6KRow(const __m256i* HWY_RESTRICT n, const Q6KScales& s, int g,
                         const int8_t* HWY_RESTRICT x, float dx, int32_t sums, __m256 acc) {
  const auto quants = [n](int k) __attribute__((always_inline)) { return n[k]; };
  return Q6KAccumulate(s.d, dx, Q6KIsum(quants, s.sa[g], s.sb[g], s.off[g], x, sums), acc);
}

// GEMV: 8 columns (rows w + c · nb) against activation row 0, each block decoded in registers
// (the skinny GEMM's Q6KRawSrc decodes into a stack block for its rows: 88 stores and loads a
// block for one row). Per half h of a block, ql chunks e = 0, 1 each give two groups (4h + e,
// 4h + 2 + e): their isums are formed as the chunks are read, then added in group order — the
// same operations as Q6KPanelRows, so the same bits.
inline HWY_NOINLINE __m256 Q6KGemvGroup(const LaneActs& a, const BlockQ6_K* HWY_RESTRICT w,
                                        size_t nb) {
  const int8_t* HWY_RESTRICT x = a.q8();
  __m256 acc = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    PrefetchNextGroup(w, nb * sizeof(BlockQ6_K), b, kLaneCols * sizeof(BlockQ6_K));
    const __m256 d = LaneScales(w + b, nb);
    __m256i v[4];  // the scale dwords
    TransposeQuads(w + b, nb, offsetof(BlockQ6_K, scales), v);
    auto half = [&]<int h>() __attribute__((always_inline)) {
      __m256i qh[8];
      Transpose32(w, nb, b, offsetof(BlockQ6_K, qh) + 32 * h, qh);
      __m256i isum[4];  // groups 4h .. 4h + 3
      auto chunk = [&]<int e>() __attribute__((always_inline)) {
        __m256i ql[8];
        Transpose32(w, nb, b, offsetof(BlockQ6_K, ql) + 64 * h + 32 * e, ql);
        auto group = [&]<bool hi>() __attribute__((always_inline)) {
          constexpr int gb = 4 * h + (hi ? 2 : 0) + e;  // group in the block
          __m256i sa, sb, off;
          Q6KGroupScales<(gb & 1) != 0>(v[gb / 2], &sa, &sb, &off);
          const auto quants = [&](int k) __attribute__((always_inline)) {
            return Q6KQuants<e, hi>(ql[k], qh[k]);
          };
          const size_t g = 8 * b + gb;
          isum[gb - 4 * h] = Q6KIsum(quants, sa, sb, off, x + g * kQK, a.s8[g]);
        };
        group.template operator()<false>();
        group.template operator()<true>();
      };
      chunk.template operator()<0>();
      chunk.template operator()<1>();
      for (int gg = 0; gg < 4; ++gg) {
        const size_t g = 8 * b + 4 * h + size_t(gg);
        acc = Q6KAccumulate(d, a.d[g], isum[gg], acc);
      }
    };
    half.template operator()<0>();
    half.template operator()<1>();
  }
  return acc;
}
// Where Q6KPanelRows reads block b of 8 columns: Block(b, tmp) → the decoded block.
struct Q6KPanelSrc {  // the GEMM's per-task panel
  const Q6Kx8* HWY_RESTRICT p;
  HWY_INLINE const Q6Kx8* Block(size_t b, Q6Kx8*) const { return p + b; }
};
struct Q6KRawSrc {  // raw rows (GEMV, skinny GEMM): decoded into tmp, next 8 rows prefetched
  const BlockQ6_K* HWY_RESTRICT w;  // 8 rows of nb blocks (row stride nb)
  size_t nb;
  HWY_INLINE const Q6Kx8* Block(size_t b, Q6Kx8* tmp) const {
    PrefetchNextGroup(w, nb * sizeof(BlockQ6_K), b, kLaneCols * sizeof(BlockQ6_K));
    InterleaveQ6K(w, nb, b, tmp);
    return tmp;
  }
};

// RT activation rows (r0 ..) against one group of 8 columns. RT = 1 on raw rows is the GEMV.
template <int RT, class Src>
HWY_NOINLINE void Q6KPanelRows(const LaneActs& a, size_t r0, Src src, __m256* acc_out) {
  static_assert(RT >= 1 && RT <= 4, "Q6KPanelRows handles 1..4 rows");
  const size_t K = a.K, ng = a.nb;                 // ng: groups of 32 per row
  const size_t nb = K / kQKK;                      // weight blocks per row
  const int8_t* HWY_RESTRICT x = a.q8() + r0 * K;  // row r at x + r · K
  const float* HWY_RESTRICT d = a.d + r0 * ng;     // row r at d + r · ng
  const int32_t* HWY_RESTRICT s = a.s8 + r0 * ng;  // (Σlo, Σhi) pairs
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
  Q6Kx8 tmp;
  for (size_t b = 0; b < nb; ++b) {
    const Q6Kx8& blk = *src.Block(b, &tmp);
    for (int j = 0; j < 8; ++j) {
      const size_t g = 8 * b + size_t(j);  // group of the row
      const __m256i* n = blk.q + 8 * j;
      const int8_t* xg = x + g * kQK;
      c0 = Q6KRow(n, blk.s, j, xg, d[g], s[g], c0);
      if constexpr (RT > 1) c1 = Q6KRow(n, blk.s, j, xg + K, d[ng + g], s[ng + g], c1);
      if constexpr (RT > 2) c2 = Q6KRow(n, blk.s, j, xg + 2 * K, d[2 * ng + g], s[2 * ng + g], c2);
      if constexpr (RT > 3) c3 = Q6KRow(n, blk.s, j, xg + 3 * K, d[3 * ng + g], s[3 * ng + g], c3);
    }
  }
  acc_out[0] = c0;
  if constexpr (RT > 1) acc_out[1] = c1;
  if constexpr (RT > 2) acc_out[2] = c2;
  if constexpr (RT > 3) acc_out[3] = c3;
}

#if HWY_TARGET == HWY_AVX3_DL
// Q6_K's prefill GEMM on AVX3_DL (R > 8): LaneWideGemm (above) with Q6Kx8's decoded panel in 16
// lanes. A row and group: two vpdpbusd chains of 4 (elements 0..15 and 16..31, {1to16}
// activations), a vpmulld by each sub-scale, the offset's madd, then Q6KAccumulate's cvt, mul
// and fma: Q6KIsum's exact isum_g and its float operations, so the same bits.

// One block of 16 columns fully decoded, as the wide GEMM's panel holds it (5696 bytes).
struct Q6Kx16 {
  __m512i q[64];         // q[8g + k]: dword c = q (0..63) of elements 4k .. 4k + 3 of group g
  __m512i sa[8], sb[8];  // group g's sA, sB of column c, int32
  __m512i off[8];        // (32 sA, 32 sB) int16 pair of column c
  __m512 d;              // d of column c
};
static_assert(sizeof(Q6Kx16) == 5696, "Q6Kx16: 89 zmm");

// Q6KQuants in 16 lanes.
template <int e, bool hi>
HWY_INLINE __m512i Q6KQuants16(__m512i ql, __m512i qh) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30);
  __m512i h;
  if constexpr (hi) {
    h = e ? _mm512_srli_epi16(qh, 2) : qh;
    ql = _mm512_srli_epi16(ql, 4);
  } else {
    h = e ? _mm512_slli_epi16(qh, 2) : _mm512_slli_epi16(qh, 4);
  }
  return _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(h, m2));
}

// Q6KGroupScales (AVX3_DL) in 16 lanes.
template <bool odd>
HWY_INLINE void Q6KGroupScales16(__m512i v, __m512i* HWY_RESTRICT sa_out,
                                 __m512i* HWY_RESTRICT sb_out, __m512i* HWY_RESTRICT off) {
  const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
  const __m512i ev = _mm512_srai_epi16(_mm512_slli_epi16(v, 8), 8);  // bytes 0, 2
  const __m512i od = _mm512_srai_epi16(v, 8);                        // bytes 1, 3
  const __m512i sa =
      odd ? _mm512_srai_epi32(ev, 16) : _mm512_srai_epi32(_mm512_slli_epi32(ev, 16), 16);
  const __m512i sb =
      odd ? _mm512_srai_epi32(od, 16) : _mm512_srai_epi32(_mm512_slli_epi32(od, 16), 16);
  *sa_out = sa;
  *sb_out = sb;
  *off =
      _mm512_or_si512(_mm512_and_si512(_mm512_slli_epi32(sa, 5), lo16), _mm512_slli_epi32(sb, 21));
}

// Block b of the 16 rows w + c · stride decoded into out (InterleaveQ6K in 16 lanes).
HWY_INLINE void InterleaveQ6K16(const BlockQ6_K* HWY_RESTRICT w, size_t stride, size_t b,
                                Q6Kx16* HWY_RESTRICT out) {
  const BlockQ6_K* p = w + b;
  auto half = [&]<int h>() __attribute__((always_inline)) {
    __m512i qh[8];
    TransposeQuads16(p, stride, offsetof(BlockQ6_K, qh) + 32 * h, qh);
    TransposeQuads16(p, stride, offsetof(BlockQ6_K, qh) + 32 * h + 16, qh + 4);
    auto chunk = [&]<int e>() __attribute__((always_inline)) {
      __m512i ql[8];
      TransposeQuads16(p, stride, offsetof(BlockQ6_K, ql) + 64 * h + 32 * e, ql);
      TransposeQuads16(p, stride, offsetof(BlockQ6_K, ql) + 64 * h + 32 * e + 16, ql + 4);
      __m512i* lo = out->q + 8 * (4 * h + e);      // group 4h + e
      __m512i* hi = out->q + 8 * (4 * h + 2 + e);  // group 4h + 2 + e
#pragma GCC unroll 8
      for (size_t k = 0; k < 8; ++k) {
        lo[k] = Q6KQuants16<e, false>(ql[k], qh[k]);
        hi[k] = Q6KQuants16<e, true>(ql[k], qh[k]);
      }
    };
    chunk.template operator()<0>();
    chunk.template operator()<1>();
  };
  half.template operator()<0>();
  half.template operator()<1>();
  __m512i v[4];  // v[j] dword c = scales[4j .. 4j + 3] of column c
  TransposeQuads16(p, stride, offsetof(BlockQ6_K, scales), v);
  for (int j = 0; j < 4; ++j) {
    Q6KGroupScales16<false>(v[j], &out->sa[2 * j], &out->sb[2 * j], &out->off[2 * j]);
    Q6KGroupScales16<true>(v[j], &out->sa[2 * j + 1], &out->sb[2 * j + 1], &out->off[2 * j + 1]);
  }
  auto f16 = [&](size_t c) { return short(p[c * stride].d); };
  out->d = _mm512_cvtph_ps(_mm256_setr_epi16(f16(0), f16(1), f16(2), f16(3), f16(4), f16(5), f16(6),
                                             f16(7), f16(8), f16(9), f16(10), f16(11), f16(12),
                                             f16(13), f16(14), f16(15)));
}

// RT activation rows (r0 ..) against the panel [nb] of 16 decoded Q6_K columns; one tile of
// LaneWideGemm.
template <int RT>
HWY_NOINLINE void Q6KPanelRows16(const LaneActs& a, size_t r0, const Q6Kx16* HWY_RESTRICT panel,
                                 __m512* acc_out) {
  static_assert(RT >= 1 && RT <= int(kZTileRows), "Q6KPanelRows16 handles 1..8 rows");
  const size_t K = a.K, ng = a.nb;                 // ng: groups of 32 per row
  const size_t nb = K / kQKK;                      // weight blocks per row
  const int8_t* HWY_RESTRICT x = a.q8() + r0 * K;  // row r at x + r · K
  const float* HWY_RESTRICT d = a.d + r0 * ng;     // row r at d + r · ng
  const int32_t* HWY_RESTRICT s = a.s8 + r0 * ng;  // (Σlo, Σhi) pairs
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
  for (size_t b = 0; b < nb; ++b) {
    const Q6Kx16& p = panel[b];
    const __m512 dw = p.d;
#pragma GCC unroll 8
    for (size_t gb = 0; gb < 8; ++gb) {
      const __m512i* n = p.q + 8 * gb;
      const __m512i n0 = n[0], n1 = n[1], n2 = n[2], n3 = n[3];
      const __m512i n4 = n[4], n5 = n[5], n6 = n[6], n7 = n[7];
      const __m512i sa = p.sa[gb], sb = p.sb[gb], off = p.off[gb];
      const size_t g = 8 * b + gb;  // group of the row
      const int8_t* xg = x + g * kQK;
      auto row = [&](size_t r, __m512& c) {
        const int8_t* xr = xg + r * K;
        __m512i lo = ZDpBusdBcast(_mm512_setzero_si512(), n0, xr);
        __m512i hi = ZDpBusdBcast(_mm512_setzero_si512(), n4, xr + 16);
        lo = ZDpBusdBcast(lo, n1, xr + 4);
        hi = ZDpBusdBcast(hi, n5, xr + 20);
        lo = ZDpBusdBcast(lo, n2, xr + 8);
        hi = ZDpBusdBcast(hi, n6, xr + 24);
        lo = ZDpBusdBcast(lo, n3, xr + 12);
        hi = ZDpBusdBcast(hi, n7, xr + 28);
        __m512i isum = _mm512_add_epi32(_mm512_mullo_epi32(lo, sa), _mm512_mullo_epi32(hi, sb));
        isum = _mm512_sub_epi32(isum, _mm512_madd_epi16(off, _mm512_set1_epi32(s[r * ng + g])));
        c = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(d[r * ng + g])),
                            _mm512_cvtepi32_ps(isum), c);
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
  }
  const __m512 c[kZTileRows] = {c0, c1, c2, c3, c4, c5, c6, c7};
  for (int r = 0; r < RT; ++r) acc_out[r] = c[r];
}
#endif  // HWY_AVX3_DL

struct Q6KKernel {
  using Block = BlockQ6_K;
  using Panel = Q6Kx8;
  using XQ = int8_t;
  static constexpr size_t kBlockElems = kQKK;
  // int8 activations as every int8 type; s8 of group g = (Σ q[0..15]) | (Σ q[16..31]) << 16.
  static void Quantize(const float* x, size_t K, int8_t* q, float* d, int32_t* s8, float* tmp) {
#if HWY_TARGET == HWY_AVX3_DL
    QuantizeQ40RowZ(x, K, q, d, s8, tmp);  // QuantizeActivationRow's bytes; s8 rewritten below
#else
    QuantizeActivationRow(x, int64_t(K), q, d, tmp);
#endif
    for (size_t g = 0; g < K / kQK; ++g) {
      int32_t lo = 0, hi = 0;
      for (size_t j = 0; j < kQK / 2; ++j) {
        lo += q[g * kQK + j];
        hi += q[g * kQK + kQK / 2 + j];
      }
      s8[g] = int32_t(uint32_t(uint16_t(int16_t(lo))) | uint32_t(uint16_t(int16_t(hi))) << 16);
    }
  }
#if HWY_TARGET == HWY_AVX3_DL
  // The prefill GEMM's (LaneWideGemm, R > kZSkinnyRows).
  using Panel16 = Q6Kx16;
  static void Interleave16(const Block* w, size_t stride, size_t b, Q6Kx16* out) {
    InterleaveQ6K16(w, stride, b, out);
  }
  template <int RT>
  static void Rows16(const LaneActs& a, size_t r0, const Q6Kx16* panel, __m512* acc) {
    Q6KPanelRows16<RT>(a, r0, panel, acc);
  }
#endif
  static __m256 Gemv(const LaneActs& a, const Block* w, size_t nb) {
    return Q6KGemvGroup(a, w, nb);
  }
  static void Interleave(const Block* w, size_t stride, size_t b, Panel* out) {
    InterleaveQ6K(w, stride, b, out);
  }
  using PanelSrc = Q6KPanelSrc;
  using RawSrc = Q6KRawSrc;  // the skinny GEMM's (LaneSkinny)
  template <int RT, class Src>
  static void Rows(const LaneActs& a, size_t r0, Src src, __m256* acc) {
    Q6KPanelRows<RT>(a, r0, src, acc);
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace es::cpu
HWY_AFTER_NAMESPACE();

#endif  // x86 AVX2 and up
#endif  // ES_CPU_KERNELS_MATMUL_LANES_K_INL_H_ toggle
