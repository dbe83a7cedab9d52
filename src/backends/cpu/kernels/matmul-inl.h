// SIMD bodies of the dense CPU matmul (f32 activations × f32/f16/bf16 weights, f32 accumulation),
// written once with Highway and compiled per target (AVX2, AVX-512, NEON, SVE, ...) by matmul.cpp.
// The policy (which path for which shape) lives in matmul.cpp; this file holds the loops.
//
// Reduction order — the batch-invariance contract of matmul.h. Every output element
//   y[r, n] = Σ_k x[r, k] W[n, k]
// is computed the same way on every path:
//   1. one vector accumulator of L lanes (L = Lanes(ScalableTag<float>) of the running target),
//      starting at +0;
//   2. for s = 0 .. ceil(K / L) - 1, in order: acc = MulAdd(x[r, sL .. sL+L), W[n, sL .. sL+L),
//      acc), where lanes past K hold 0 in both operands (so lane j sums k ≡ j mod L in k order);
//   3. y = GetLane(SumOfLanes(acc)) (+ bias[n]).
// GEMV keeps the accumulator in a register for all of K; GEMM (K-blocked) parks it in scratch
// memory between K blocks, which stores and reloads the same f32 values. Parallelism comes from
// computing several outputs at once (independent accumulators), never from splitting one output's
// sum, so neither R, nor the other rows, nor the thread count changes a single bit of y[r, n].
//
// Weight conversion is exact on every path (f16 and bf16 values are all representable in f32) and
// partial tails go through the same SIMD conversion as whole vectors (copied raw into a
// zero-padded buffer first), so GEMV's in-register conversion and GEMM's f32 panels agree.

#if defined(ES_CPU_KERNELS_MATMUL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ES_CPU_KERNELS_MATMUL_INL_H_
#undef ES_CPU_KERNELS_MATMUL_INL_H_
#else
#define ES_CPU_KERNELS_MATMUL_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu/kernels/matmul.h"
#include "cpu/kernels/scratch.h"
#include "edgeseek/internal/core/thread_pool.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace es::cpu {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Largest vector of any target, in f32 lanes (sizes the stack buffers for tails).
constexpr size_t kMaxLanesF32 = HWY_MAX_BYTES / sizeof(float);

// ---------------------------------------------------------------------------------------------
// Loading L weights of any dense type as f32 lanes (lane j = element j).

HWY_INLINE VF LoadW(DF df, const float* HWY_RESTRICT p) { return hn::LoadU(df, p); }

// bf16 is the top half of an f32: widen to u32 and shift.
HWY_INLINE VF LoadW(DF df, const hwy::bfloat16_t* HWY_RESTRICT p) {
  const hn::Rebind<uint16_t, DF> du16;
  const hn::RebindToUnsigned<DF> du32;
  const auto bits = hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p));
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, bits)));
}

// f16: F16C / NEON fcvt through Highway's PromoteTo.
HWY_INLINE VF LoadW(DF df, const hwy::float16_t* HWY_RESTRICT p) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, p));
}

// The last partial vector of a row: elements [0, n) of p, zeros after, converted by the same
// SIMD path as whole vectors.
template <class WT>
HWY_INLINE VF LoadWTail(DF df, const WT* HWY_RESTRICT p, size_t n) {
  HWY_ALIGN WT raw[kMaxLanesF32];
  std::memset(raw, 0, sizeof(raw));
  std::memcpy(raw, p, n * sizeof(WT));
  return LoadW(df, raw);
}

HWY_INLINE float ReduceLanes(DF df, VF v) { return hn::GetLane(hn::SumOfLanes(df, v)); }

// ---------------------------------------------------------------------------------------------
// GEMV body: NR output columns of one activation row, weights read straight from their rows.
//   xpad: [Kp] f32, K values then zeros up to Kp = roundup(K, L), vector-aligned
//   w:    NR rows of K elements, row stride w_stride elements
//   out:  [NR] dot products (before bias)

template <int NR, class WT>
HWY_INLINE void DotRows(DF df, const float* HWY_RESTRICT xpad, const WT* HWY_RESTRICT w,
                        size_t w_stride, size_t K, float* HWY_RESTRICT out) {
  static_assert(NR >= 1 && NR <= 8, "DotRows handles 1..8 columns");
  const size_t L = hn::Lanes(df);
  VF a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
  VF a4 = hn::Zero(df), a5 = hn::Zero(df), a6 = hn::Zero(df), a7 = hn::Zero(df);
  const WT* HWY_RESTRICT w0 = w;
#define ES_GEMV_STEP(LOAD)                                  \
  do {                                                      \
    a0 = hn::MulAdd(xv, LOAD(0), a0);                       \
    if constexpr (NR > 1) a1 = hn::MulAdd(xv, LOAD(1), a1); \
    if constexpr (NR > 2) a2 = hn::MulAdd(xv, LOAD(2), a2); \
    if constexpr (NR > 3) a3 = hn::MulAdd(xv, LOAD(3), a3); \
    if constexpr (NR > 4) a4 = hn::MulAdd(xv, LOAD(4), a4); \
    if constexpr (NR > 5) a5 = hn::MulAdd(xv, LOAD(5), a5); \
    if constexpr (NR > 6) a6 = hn::MulAdd(xv, LOAD(6), a6); \
    if constexpr (NR > 7) a7 = hn::MulAdd(xv, LOAD(7), a7); \
  } while (0)
  size_t k = 0;
  for (; k + L <= K; k += L) {
    const VF xv = hn::Load(df, xpad + k);
#define ES_LOAD_FULL(c) LoadW(df, w0 + (c)*w_stride + k)
    ES_GEMV_STEP(ES_LOAD_FULL);
#undef ES_LOAD_FULL
  }
  if (k < K) {
    const VF xv = hn::Load(df, xpad + k);
#define ES_LOAD_TAIL(c) LoadWTail(df, w0 + (c)*w_stride + k, K - k)
    ES_GEMV_STEP(ES_LOAD_TAIL);
#undef ES_LOAD_TAIL
  }
#undef ES_GEMV_STEP
  out[0] = ReduceLanes(df, a0);
  if constexpr (NR > 1) out[1] = ReduceLanes(df, a1);
  if constexpr (NR > 2) out[2] = ReduceLanes(df, a2);
  if constexpr (NR > 3) out[3] = ReduceLanes(df, a3);
  if constexpr (NR > 4) out[4] = ReduceLanes(df, a4);
  if constexpr (NR > 5) out[5] = ReduceLanes(df, a5);
  if constexpr (NR > 6) out[6] = ReduceLanes(df, a6);
  if constexpr (NR > 7) out[7] = ReduceLanes(df, a7);
}

// y[0, n] for all n: columns split over threads in contiguous ranges of kGemvCols.
// epi (or null): each group's outputs as they are written.
template <class WT>
void Gemv(const float* HWY_RESTRICT x, size_t K, const WT* HWY_RESTRICT w, size_t N,
          const float* HWY_RESTRICT bias, float* HWY_RESTRICT y, ThreadPool& pool,
          const MatMulEpilogue* epi) {
  constexpr int kGemvCols = 8;
  const DF df;
  const size_t L = hn::Lanes(df);
  const size_t Kp = (K + L - 1) / L * L;
  float* xpad = ThreadScratch(1).Floats(std::max<size_t>(Kp, 1));
  std::memcpy(xpad, x, K * sizeof(float));
  std::fill(xpad + K, xpad + Kp, 0.0f);
  const size_t groups = (N + kGemvCols - 1) / kGemvCols;
  pool.ParallelFor(int64_t(groups), [&](int64_t g0, int64_t g1, int) {
    const DF d;
    HWY_ALIGN float out[kGemvCols];
    for (size_t g = size_t(g0); g < size_t(g1); ++g) {
      const size_t n0 = g * kGemvCols;
      const size_t nc = std::min<size_t>(kGemvCols, N - n0);
      if (nc == kGemvCols) {
        DotRows<kGemvCols>(d, xpad, w + n0 * K, K, K, out);
      } else {
        for (size_t c = 0; c < nc; ++c) DotRows<1>(d, xpad, w + (n0 + c) * K, K, K, out + c);
      }
      for (size_t c = 0; c < nc; ++c) y[n0 + c] = out[c] + (bias ? bias[n0 + c] : 0.0f);
      if (epi) (*epi)(0, 1, int64_t(n0), int64_t(n0 + nc));
    }
  });
}

// ---------------------------------------------------------------------------------------------
// GEMM micro-kernel: MR rows × NR columns of vector accumulators over `steps` vectors of K.
//   xp:  MR packed activation rows, row stride xs floats (zeros past K)
//   wp:  NR packed f32 weight rows (a panel), row stride ws floats (zeros past K)
//   acc: accumulators, vector (r, c) at acc + r * as + c * L; loaded, advanced, stored back.

// Register budget: MR*NR accumulators + NR weight vectors + 1 activation vector.
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
constexpr int kNR = 3;  // 16 vector registers (AVX2/SSE4): 12 + 3 + 1
#else
constexpr int kNR = 6;  // 32 vector registers (AVX-512, NEON, SVE): 24 + 6 + 1
#endif
constexpr int kMR = 4;

template <int MR, int NR>
HWY_INLINE void PanelTile(DF df, const float* HWY_RESTRICT xp, size_t xs,
                          const float* HWY_RESTRICT wp, size_t ws, size_t steps,
                          float* HWY_RESTRICT acc, size_t as) {
  static_assert(MR >= 1 && MR <= 4 && NR >= 1 && NR <= 6, "PanelTile handles 4x6 at most");
  const size_t L = hn::Lanes(df);
#define ES_ACC_LOAD(r, c) \
  VF a##r##c = ((r) < MR && (c) < NR) ? hn::Load(df, acc + (r)*as + (c)*L) : hn::Zero(df)
#define ES_ACC_ROW_LOAD(r) \
  ES_ACC_LOAD(r, 0);       \
  ES_ACC_LOAD(r, 1);       \
  ES_ACC_LOAD(r, 2);       \
  ES_ACC_LOAD(r, 3);       \
  ES_ACC_LOAD(r, 4);       \
  ES_ACC_LOAD(r, 5)
  ES_ACC_ROW_LOAD(0);
  ES_ACC_ROW_LOAD(1);
  ES_ACC_ROW_LOAD(2);
  ES_ACC_ROW_LOAD(3);
#undef ES_ACC_ROW_LOAD
#undef ES_ACC_LOAD

  for (size_t s = 0; s < steps; ++s) {
    const size_t k = s * L;
    const VF w0 = hn::Load(df, wp + k);
    const VF w1 = NR > 1 ? hn::Load(df, wp + ws + k) : w0;
    const VF w2 = NR > 2 ? hn::Load(df, wp + 2 * ws + k) : w0;
    const VF w3 = NR > 3 ? hn::Load(df, wp + 3 * ws + k) : w0;
    const VF w4 = NR > 4 ? hn::Load(df, wp + 4 * ws + k) : w0;
    const VF w5 = NR > 5 ? hn::Load(df, wp + 5 * ws + k) : w0;
#define ES_ROW_STEP(r)                                           \
  if constexpr (MR > (r)) {                                      \
    const VF xv = hn::Load(df, xp + (r)*xs + k);                 \
    a##r##0 = hn::MulAdd(xv, w0, a##r##0);                       \
    if constexpr (NR > 1) a##r##1 = hn::MulAdd(xv, w1, a##r##1); \
    if constexpr (NR > 2) a##r##2 = hn::MulAdd(xv, w2, a##r##2); \
    if constexpr (NR > 3) a##r##3 = hn::MulAdd(xv, w3, a##r##3); \
    if constexpr (NR > 4) a##r##4 = hn::MulAdd(xv, w4, a##r##4); \
    if constexpr (NR > 5) a##r##5 = hn::MulAdd(xv, w5, a##r##5); \
  }
    ES_ROW_STEP(0)
    ES_ROW_STEP(1)
    ES_ROW_STEP(2)
    ES_ROW_STEP(3)
#undef ES_ROW_STEP
  }

#define ES_ACC_STORE(r, c) \
  if constexpr ((r) < MR && (c) < NR) hn::Store(a##r##c, df, acc + (r)*as + (c)*L)
#define ES_ACC_ROW_STORE(r) \
  ES_ACC_STORE(r, 0);       \
  ES_ACC_STORE(r, 1);       \
  ES_ACC_STORE(r, 2);       \
  ES_ACC_STORE(r, 3);       \
  ES_ACC_STORE(r, 4);       \
  ES_ACC_STORE(r, 5)
  ES_ACC_ROW_STORE(0);
  ES_ACC_ROW_STORE(1);
  ES_ACC_ROW_STORE(2);
  ES_ACC_ROW_STORE(3);
#undef ES_ACC_ROW_STORE
#undef ES_ACC_STORE
}

// Converts elements [k0, k1) of a weight row into f32 at dst, then zeros up to dst[kc).
template <class WT>
HWY_INLINE void ConvertRow(DF df, const WT* HWY_RESTRICT src, size_t k0, size_t k1, size_t kc,
                           float* HWY_RESTRICT dst) {
  const size_t L = hn::Lanes(df);
  size_t j = 0;
  for (; k0 + j + L <= k1; j += L) hn::Store(LoadW(df, src + k0 + j), df, dst + j);
  if (k0 + j < k1) {
    hn::Store(LoadWTail(df, src + k0 + j, k1 - k0 - j), df, dst + j);
    j += L;
  }
  for (; j < kc; j += L) hn::Store(hn::Zero(df), df, dst + j);
}

// Blocking of the GEMM (f32 elements): K in blocks of kKC, rows in blocks of kRC, columns in
// blocks of kNC. Per thread: accumulators kRC × kNC × L, packed x kRC × kKC, panel kNC × kKC —
// about 140 KB on AVX2, inside a 512 KB L2.
constexpr size_t kKC = 256;
constexpr size_t kRC = 64;
constexpr size_t kNC = 8 * kNR;

template <int MR>
HWY_INLINE void PanelRowTiles(DF df, const float* xp, const float* wp, size_t steps, float* acc,
                              size_t ncp) {
  const size_t L = hn::Lanes(df);
  for (size_t c = 0; c < ncp; c += kNR) {
    PanelTile<MR, kNR>(df, xp, kKC, wp + c * kKC, kKC, steps, acc + c * L, kNC * L);
  }
}

// y[r, n] for all r < R, n < N; one task = (column block, row block); epi (or null): each
// task's outputs when it is done.
template <class WT>
void Gemm(const float* HWY_RESTRICT x, size_t R, size_t K, const WT* HWY_RESTRICT w, size_t N,
          const float* HWY_RESTRICT bias, float* HWY_RESTRICT y, size_t ldy, ThreadPool& pool,
          const MatMulEpilogue* epi) {
  const DF df0;
  const size_t L = hn::Lanes(df0);
  const size_t Kp = (K + L - 1) / L * L;
  const size_t row_blocks = (R + kRC - 1) / kRC;
  const size_t col_blocks = (N + kNC - 1) / kNC;
  pool.ParallelFor(int64_t(row_blocks * col_blocks), [&](int64_t t0, int64_t t1, int) {
    const DF df;
    float* acc = ThreadScratch(0).Floats(kRC * kNC * L + kRC * kKC + kNC * kKC);
    float* xp = acc + kRC * kNC * L;
    float* wp = xp + kRC * kKC;
    for (size_t t = size_t(t0); t < size_t(t1); ++t) {
      const size_t n0 = (t / row_blocks) * kNC, r0 = (t % row_blocks) * kRC;
      const size_t nc = std::min(kNC, N - n0), rc = std::min(kRC, R - r0);
      const size_t ncp = (nc + kNR - 1) / kNR * kNR;  // padded with zero weight rows
      for (size_t i = 0; i < rc * kNC * L; i += L) hn::Store(hn::Zero(df), df, acc + i);
      for (size_t k0 = 0; k0 < Kp; k0 += kKC) {
        const size_t kc = std::min(kKC, Kp - k0), k1 = std::min(K, k0 + kc);
        for (size_t r = 0; r < rc; ++r) {
          ConvertRow(df, x + (r0 + r) * K, k0, k1, kc, xp + r * kKC);
        }
        for (size_t c = 0; c < ncp; ++c) {
          if (c < nc) {
            ConvertRow(df, w + (n0 + c) * K, k0, k1, kc, wp + c * kKC);
          } else {
            std::fill(wp + c * kKC, wp + c * kKC + kc, 0.0f);
          }
        }
        const size_t steps = kc / L;
        size_t r = 0;
        for (; r + kMR <= rc; r += kMR) {
          PanelRowTiles<kMR>(df, xp + r * kKC, wp, steps, acc + r * kNC * L, ncp);
        }
        switch (rc - r) {
          case 3:
            PanelRowTiles<3>(df, xp + r * kKC, wp, steps, acc + r * kNC * L, ncp);
            break;
          case 2:
            PanelRowTiles<2>(df, xp + r * kKC, wp, steps, acc + r * kNC * L, ncp);
            break;
          case 1:
            PanelRowTiles<1>(df, xp + r * kKC, wp, steps, acc + r * kNC * L, ncp);
            break;
          default:
            break;
        }
      }
      for (size_t r = 0; r < rc; ++r) {
        float* yr = y + (r0 + r) * ldy + n0;
        for (size_t c = 0; c < nc; ++c) {
          yr[c] =
              ReduceLanes(df, hn::Load(df, acc + (r * kNC + c) * L)) + (bias ? bias[n0 + c] : 0.0f);
        }
      }
      if (epi) (*epi)(int64_t(r0), int64_t(r0 + rc), int64_t(n0), int64_t(n0 + nc));
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace es::cpu
HWY_AFTER_NAMESPACE();

#endif  // ES_CPU_KERNELS_MATMUL_INL_H_ toggle
