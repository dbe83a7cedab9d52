// SIMD bodies of the CPU matmul over I4F weights (edgeseek's int4 with an f32 scale and a 4-bit
// zero point per 32, include/edgeseek/internal/quant/blocks.h) × f32 activations, compiled per
// target by matmul.cpp.
//
// Why f32 activations: I4F holds onnxruntime's MatMulNBits weights of f32 models, and onnxruntime
// computes those (accuracy_level unset) with the weights dequantized and the activations as they
// are. The int8 activations of the other block types (matmul_quant-inl.h) put the tiny golden
// models' logits ~2 % of their scale away from onnxruntime's, against the 1e-3 the import
// promises; with f32 activations they agree to f32 rounding.
//
// Per output, in this fixed order (the same in GEMV and GEMM, whatever R, N or the threads):
//   for each block b of 32, in order:  s = Σ_j (q_j − z)·x_j  over vectors of L lanes
//                                      (L = min(16, the target's f32 lanes), MulAdd from zero),
//                                      acc = MulAdd(d_b, s, acc)
//   y = sum of acc's lanes (+ bias).
// The levels q − z (integers in −15..15) are decoded into f32 exactly, so (q − z)·x is the exact
// product and the sum differs from Σ x·((q − z)·d) by f32 rounding alone. Columns go in groups
// of kI4FCols: their rows are decoded once into scratch, then every activation row of the task
// runs the same non-inlined dot over them.

#if defined(ES_CPU_KERNELS_MATMUL_I4F_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ES_CPU_KERNELS_MATMUL_I4F_INL_H_
#undef ES_CPU_KERNELS_MATMUL_I4F_INL_H_
#else
#define ES_CPU_KERNELS_MATMUL_I4F_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cpu/kernels/scratch.h"
#include "cpu/kernels/task_grid.h"
#include "edgeseek/internal/core/thread_pool.h"
#include "edgeseek/internal/quant/blocks.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace es::cpu {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;
using DI4F = hn::CappedTag<float, 16>;  // lanes divide 16, so a block is whole vectors

// Levels q − z of the n blocks at w into lv [n * 32] f32 (element order), scales into d [n].
HWY_INLINE void DecodeI4F(const BlockI4F* HWY_RESTRICT w, size_t n, float* HWY_RESTRICT lv,
                          float* HWY_RESTRICT d) {
  const DI4F df;
  const hn::RebindToSigned<DI4F> di;
  const hn::Rebind<uint8_t, DI4F> du8;
  const size_t L = hn::Lanes(df);
  for (size_t b = 0; b < n; ++b) {
    const BlockI4F& blk = w[b];
    d[b] = blk.d;
    const auto z = hn::Set(di, int32_t(blk.z));
    for (size_t j = 0; j < 16; j += L) {
      const auto bytes = hn::LoadU(du8, blk.qs + j);
      const auto lo = hn::And(bytes, hn::Set(du8, uint8_t(0x0F)));
      const auto hi = hn::ShiftRight<4>(bytes);
      hn::StoreU(hn::ConvertTo(df, hn::Sub(hn::PromoteTo(di, lo), z)), df, lv + b * kQK + j);
      hn::StoreU(hn::ConvertTo(df, hn::Sub(hn::PromoteTo(di, hi), z)), df, lv + b * kQK + 16 + j);
    }
  }
}

// out[c] = Σ_k x[k] w_c[k] for NR decoded columns (levels lv + c * K, scales d + c * nb).
template <int NR>
HWY_NOINLINE void I4FDotRows(const float* HWY_RESTRICT x, size_t nb, const float* HWY_RESTRICT lv,
                             const float* HWY_RESTRICT d, float* HWY_RESTRICT out) {
  static_assert(NR >= 1 && NR <= 4, "I4FDotRows handles 1..4 columns");
  const DI4F df;
  const size_t L = hn::Lanes(df), K = nb * kQK;
  auto a0 = hn::Zero(df), a1 = a0, a2 = a0, a3 = a0;
  for (size_t b = 0; b < nb; ++b) {
    auto s0 = hn::Zero(df), s1 = s0, s2 = s0, s3 = s0;
    for (size_t j = 0; j < size_t(kQK); j += L) {
      const size_t k = b * kQK + j;
      const auto xv = hn::LoadU(df, x + k);
      s0 = hn::MulAdd(xv, hn::LoadU(df, lv + k), s0);
      if constexpr (NR > 1) s1 = hn::MulAdd(xv, hn::LoadU(df, lv + K + k), s1);
      if constexpr (NR > 2) s2 = hn::MulAdd(xv, hn::LoadU(df, lv + 2 * K + k), s2);
      if constexpr (NR > 3) s3 = hn::MulAdd(xv, hn::LoadU(df, lv + 3 * K + k), s3);
    }
    a0 = hn::MulAdd(hn::Set(df, d[b]), s0, a0);
    if constexpr (NR > 1) a1 = hn::MulAdd(hn::Set(df, d[nb + b]), s1, a1);
    if constexpr (NR > 2) a2 = hn::MulAdd(hn::Set(df, d[2 * nb + b]), s2, a2);
    if constexpr (NR > 3) a3 = hn::MulAdd(hn::Set(df, d[3 * nb + b]), s3, a3);
  }
  out[0] = hn::GetLane(hn::SumOfLanes(df, a0));
  if constexpr (NR > 1) out[1] = hn::GetLane(hn::SumOfLanes(df, a1));
  if constexpr (NR > 2) out[2] = hn::GetLane(hn::SumOfLanes(df, a2));
  if constexpr (NR > 3) out[3] = hn::GetLane(hn::SumOfLanes(df, a3));
}

constexpr size_t kI4FCols = 4;  // columns decoded together
constexpr size_t kI4FNC = 32;   // columns per task
constexpr size_t kI4FRC = 32;   // rows per task

// y [R, N] (row stride ldy) = x [R, K] · wᵀ (+ bias), w N rows of K / 32 blocks; epi (or null):
// each task's outputs when it is done.
inline void I4FMatMul(const float* x, size_t R, size_t K, const BlockI4F* w, size_t N,
                      const float* bias, float* y, size_t ldy, ThreadPool& pool,
                      const MatMulEpilogue* epi) {
  const size_t nb = K / kQK;
  const TaskGrid<kI4FRC, kI4FNC> tasks(R, N);
  pool.ParallelFor(int64_t(tasks.Count()), [&](int64_t t0, int64_t t1, int) {
    float* lv = ThreadScratch(0).Floats(kI4FCols * (K + nb));
    float* d = lv + kI4FCols * K;
    float out[kI4FCols];
    for (size_t t = size_t(t0); t < size_t(t1); ++t) {
      const auto [r0, r1, n0, n1] = tasks[t];
      for (size_t n = n0; n < n1; n += kI4FCols) {
        const size_t nc = std::min(kI4FCols, n1 - n);
        for (size_t c = 0; c < nc; ++c) DecodeI4F(w + (n + c) * nb, nb, lv + c * K, d + c * nb);
        for (size_t r = r0; r < r1; ++r) {
          if (nc == kI4FCols) {
            I4FDotRows<kI4FCols>(x + r * K, nb, lv, d, out);
          } else {
            for (size_t c = 0; c < nc; ++c)
              I4FDotRows<1>(x + r * K, nb, lv + c * K, d + c * nb, out + c);
          }
          for (size_t c = 0; c < nc; ++c) y[r * ldy + n + c] = out[c] + (bias ? bias[n + c] : 0.0f);
        }
      }
      if (epi) (*epi)(int64_t(r0), int64_t(r1), int64_t(n0), int64_t(n1));
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace es::cpu
HWY_AFTER_NAMESPACE();

#endif  // ES_CPU_KERNELS_MATMUL_I4F_INL_H_ toggle
