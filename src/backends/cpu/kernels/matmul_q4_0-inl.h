// Q4_0 weights × int8 activations on x86 (AVX2 and up): the column-lane kernels that decode (GEMV,
// R = 1) and prefill (GEMM, R > 1) run, included by matmul_quant-inl.h once per Highway target.
//
// Layout in registers: 8 weight columns side by side, one column per f32 lane. Block b of 8
// columns is interleaved into four 32-byte vectors q[j] (j = 0..3) whose byte 4c + i is byte
// 4j + i of column c's qs — low nibble = element 4j + i, high nibble = element 16 + 4j + i. So
//   Σ_{k<32} nib_c,k · x_k = Σ_j maddubs(q[j] & 0xF, bcast4(x[4j..])) + maddubs(q[j] >> 4, bcast4(x[16+4j..]))
// with the unsigned nibbles (0..15) straight into maddubs against the signed int8 activations;
// eight int16 products of at most 2 · 15 · 127 add up to at most 30480 < 32767, so the int16
// sums are exact; one madd with ones makes lane c's int32 dot, and the Q4_0 offset comes out as
//   isum_c = Σ nib_c,k x_k − 8 · Σ_k x_k      (8 · Σx precomputed once per activation block).
//
// Reduction order (batch invariance): output (r, n) is
//   acc = +0;  for b = 0 … K/32 − 1 in order:  acc = fma(d_w[n, b] · d_x[r, b], float(isum), acc)
//   y = acc + bias[n]
// — one f32 multiply and one fused multiply-add per block, the same in the GEMV (interleaving in
// registers from the raw rows) and in the GEMM (interleaving once per task into a panel that a
// tile of up to 4 activation rows reads). Integer parts are exact, so R, the tile shape, the
// thread count and the other rows never change a bit of y.

#if defined(ES_CPU_KERNELS_MATMUL_Q4_0_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ES_CPU_KERNELS_MATMUL_Q4_0_INL_H_
#undef ES_CPU_KERNELS_MATMUL_Q4_0_INL_H_
#else
#define ES_CPU_KERNELS_MATMUL_Q4_0_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu/kernels/scratch.h"
#include "edgeseek/core/thread_pool.h"
#include "edgeseek/quant/blocks.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#include <immintrin.h>

HWY_BEFORE_NAMESPACE();
namespace es::cpu {
namespace HWY_NAMESPACE {

constexpr size_t kQ40Cols = 8;  // weight columns per interleaved group (one per f32 lane)

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
  const __m128i d16 = _mm_setr_epi16(
      short(p[0].d), short(p[stride].d), short(p[2 * stride].d), short(p[3 * stride].d),
      short(p[4 * stride].d), short(p[5 * stride].d), short(p[6 * stride].d),
      short(p[7 * stride].d));
  out->d = _mm256_cvtph_ps(d16);
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

HWY_INLINE void UnpackQ40(const Q40x8& blk, Q40Nibbles* n) {
  const __m256i m = _mm256_set1_epi8(0x0F);
  n->lo0 = _mm256_and_si256(blk.q[0], m);
  n->lo1 = _mm256_and_si256(blk.q[1], m);
  n->lo2 = _mm256_and_si256(blk.q[2], m);
  n->lo3 = _mm256_and_si256(blk.q[3], m);
  n->hi0 = _mm256_and_si256(_mm256_srli_epi16(blk.q[0], 4), m);
  n->hi1 = _mm256_and_si256(_mm256_srli_epi16(blk.q[1], 4), m);
  n->hi2 = _mm256_and_si256(_mm256_srli_epi16(blk.q[2], 4), m);
  n->hi3 = _mm256_and_si256(_mm256_srli_epi16(blk.q[3], 4), m);
  n->d = blk.d;
}

// One block of one activation row: acc (lane c = column c) = fma(d_w · dx, isum_c, acc).
//   x: the row's 32 int8 quants of this block; dx, s8: its scale and 8 · Σ quants.
HWY_INLINE __m256 Q40Row(const Q40Nibbles& n, const int8_t* HWY_RESTRICT x, float dx, int32_t s8,
                         __m256 acc) {
  __m256i p = _mm256_maddubs_epi16(n.lo0, Bcast4(x));
  p = _mm256_add_epi16(p, _mm256_maddubs_epi16(n.lo1, Bcast4(x + 4)));
  p = _mm256_add_epi16(p, _mm256_maddubs_epi16(n.lo2, Bcast4(x + 8)));
  p = _mm256_add_epi16(p, _mm256_maddubs_epi16(n.lo3, Bcast4(x + 12)));
  p = _mm256_add_epi16(p, _mm256_maddubs_epi16(n.hi0, Bcast4(x + 16)));
  p = _mm256_add_epi16(p, _mm256_maddubs_epi16(n.hi1, Bcast4(x + 20)));
  p = _mm256_add_epi16(p, _mm256_maddubs_epi16(n.hi2, Bcast4(x + 24)));
  p = _mm256_add_epi16(p, _mm256_maddubs_epi16(n.hi3, Bcast4(x + 28)));
  const __m256i isum =
      _mm256_sub_epi32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)), _mm256_set1_epi32(s8));
  return _mm256_fmadd_ps(_mm256_mul_ps(n.d, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(isum), acc);
}

// Quantized activation rows, as the kernels read them.
struct Q40Acts {
  const int8_t* q;    // [R, K] int8
  const float* d;     // [R, nb] scales
  const int32_t* s8;  // [R, nb] 8 · Σ quants of the block
  size_t K, nb;
};

// y[0..nc) of one row (lanes of acc) plus bias.
HWY_INLINE void Q40Store(__m256 acc, const float* bias, size_t nc, float* y) {
  alignas(32) float out[kQ40Cols];
  _mm256_store_ps(out, acc);
  for (size_t c = 0; c < nc; ++c) y[c] = out[c] + (bias ? bias[c] : 0.0f);
}

// GEMV: 8 columns (rows w + c · nb of the weights) against activation row 0, interleaving each
// block in registers. Not inlined: one copy of this loop for full and padded groups.
HWY_NOINLINE void Q40GemvGroup(const Q40Acts& a, const BlockQ4_0* HWY_RESTRICT w, size_t nb,
                               __m256* acc_out) {
  __m256 acc = _mm256_setzero_ps();
  const char* base = reinterpret_cast<const char*>(w);
  const size_t row_bytes = nb * sizeof(BlockQ4_0);
  for (size_t b = 0; b < nb; ++b) {
    // The next 8 rows (contiguous, 8 · row_bytes) are fetched at the pace these are consumed,
    // so that a group never starts by waiting for 8 new streams (short rows, K = 1536: 864 B).
    const char* next = base + kQ40Cols * row_bytes + b * kQ40Cols * sizeof(BlockQ4_0);
    hwy::Prefetch(next);
    hwy::Prefetch(next + 64);
    hwy::Prefetch(next + 128);
    Q40x8 blk;
    InterleaveQ40(w, nb, b, &blk);
    Q40Nibbles n;
    UnpackQ40(blk, &n);
    acc = Q40Row(n, a.q + b * kQK, a.d[b], a.s8[b], acc);
  }
  *acc_out = acc;
}

// GEMM: RT activation rows (r0 ..) against a panel of 8 interleaved columns [nb]; named
// accumulators so that they stay in registers.
template <int RT>
HWY_NOINLINE void Q40PanelRows(const Q40Acts& a, size_t r0, const Q40x8* HWY_RESTRICT panel,
                               __m256* acc_out) {
  static_assert(RT >= 1 && RT <= 4, "Q40PanelRows handles 1..4 rows");
  const size_t K = a.K, nb = a.nb;
  const int8_t* HWY_RESTRICT x = a.q + r0 * K;  // row r at x + r · K
  const float* HWY_RESTRICT d = a.d + r0 * nb;  // row r at d + r · nb
  const int32_t* HWY_RESTRICT s = a.s8 + r0 * nb;
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
  for (size_t b = 0; b < nb; ++b) {
    Q40Nibbles n;
    UnpackQ40(panel[b], &n);
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

constexpr size_t kQ40RowTile = 4;   // activation rows per GEMM register tile
constexpr size_t kQ40TaskCols = 32; // columns per GEMM task (4 groups of 8)
constexpr size_t kQ40TaskRows = 64; // rows per GEMM task

inline void Q40MatMul(const float* x, size_t R, size_t K, const BlockQ4_0* w, size_t N,
                      const float* bias, float* y, size_t ldy, ThreadPool& pool) {
  const size_t nb = K / kQK;
  // Scratch: R · K int8 quants (K is a multiple of 32: K/4 floats a row), R · nb scales, R · nb
  // float sums (unused here), R · nb int32 8 · Σq.
  float* buf = ThreadScratch(1).Floats(std::max<size_t>(1, R * K / 4 + 3 * R * nb));
  int8_t* xq = reinterpret_cast<int8_t*>(buf);
  float* xd = buf + R * K / 4;
  float* xs = xd + R * nb;
  int32_t* s8 = reinterpret_cast<int32_t*>(xs + R * nb);
  pool.ParallelFor(int64_t(R), [&](int64_t r0, int64_t r1, int) {
    for (size_t r = size_t(r0); r < size_t(r1); ++r) {
      QuantizeActivationRow(x + r * K, int64_t(K), xq + r * K, xd + r * nb, xs + r * nb);
      const int8_t* q = xq + r * K;
      for (size_t b = 0; b < nb; ++b) {
        int32_t s = 0;
        for (size_t j = 0; j < kQK; ++j) s += q[b * kQK + j];
        s8[r * nb + b] = 8 * s;
      }
    }
  });
  const Q40Acts acts{xq, xd, s8, K, nb};
  const size_t groups = (N + kQ40Cols - 1) / kQ40Cols;
  // The columns of a partial last group, copied into 8 zero-padded rows (slot 0 of the scratch).
  auto padded = [&](size_t n, size_t nc) {
    float* mem = ThreadScratch(0).Floats((kQ40Cols * nb * sizeof(BlockQ4_0) + 3) / 4);
    BlockQ4_0* p = reinterpret_cast<BlockQ4_0*>(mem);
    std::memset(static_cast<void*>(p), 0, kQ40Cols * nb * sizeof(BlockQ4_0));
    std::memcpy(static_cast<void*>(p), w + n * nb, nc * nb * sizeof(BlockQ4_0));
    return static_cast<const BlockQ4_0*>(p);
  };
  if (R == 1) {
    pool.ParallelFor(int64_t(groups), [&](int64_t g0, int64_t g1, int) {
      for (size_t g = size_t(g0); g < size_t(g1); ++g) {
        const size_t n = g * kQ40Cols, nc = std::min(kQ40Cols, N - n);
        __m256 acc;
        Q40GemvGroup(acts, nc == kQ40Cols ? w + n * nb : padded(n, nc), nb, &acc);
        Q40Store(acc, bias ? bias + n : nullptr, nc, y + n);
      }
    });
    return;
  }
  const size_t row_blocks = (R + kQ40TaskRows - 1) / kQ40TaskRows;
  const size_t col_blocks = (N + kQ40TaskCols - 1) / kQ40TaskCols;
  pool.ParallelFor(int64_t(row_blocks * col_blocks), [&](int64_t t0, int64_t t1, int) {
    // Panel: [nb] interleaved blocks of 8 columns (slot 1 holds the activations: use a local).
    thread_local hwy::AlignedFreeUniquePtr<Q40x8[]> panel_mem;
    thread_local size_t panel_size = 0;
    if (panel_size < nb) {
      panel_mem = hwy::AllocateAligned<Q40x8>(nb);
      panel_size = nb;
    }
    Q40x8* panel = panel_mem.get();
    for (size_t t = size_t(t0); t < size_t(t1); ++t) {
      const size_t n0 = (t / row_blocks) * kQ40TaskCols, r0 = (t % row_blocks) * kQ40TaskRows;
      const size_t n1 = std::min(N, n0 + kQ40TaskCols), r1 = std::min(R, r0 + kQ40TaskRows);
      for (size_t n = n0; n < n1; n += kQ40Cols) {
        const size_t nc = std::min(kQ40Cols, n1 - n);
        const BlockQ4_0* src = nc == kQ40Cols ? w + n * nb : padded(n, nc);
        for (size_t b = 0; b < nb; ++b) InterleaveQ40(src, nb, b, &panel[b]);
        const float* bn = bias ? bias + n : nullptr;
        size_t r = r0;
        __m256 acc[kQ40RowTile];
        for (; r + kQ40RowTile <= r1; r += kQ40RowTile) {
          Q40PanelRows<kQ40RowTile>(acts, r, panel, acc);
          for (size_t i = 0; i < kQ40RowTile; ++i) Q40Store(acc[i], bn, nc, y + (r + i) * ldy + n);
        }
        for (; r < r1; ++r) {
          Q40PanelRows<1>(acts, r, panel, acc);
          Q40Store(acc[0], bn, nc, y + r * ldy + n);
        }
      }
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace es::cpu
HWY_AFTER_NAMESPACE();

#endif  // x86 AVX2 and up
#endif  // ES_CPU_KERNELS_MATMUL_Q4_0_INL_H_ toggle
