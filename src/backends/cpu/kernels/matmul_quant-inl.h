// SIMD bodies of the block-quantized CPU matmul, compiled per target by matmul.cpp:
// weights Q8_0 / Q4_0 (llama.cpp layouts, include/edgeseek/quant/blocks.h) × f32 activations.
//
// Each activation row is quantized once per call, per block of 32, to int8 with an f32 scale
// (d = absmax / 127, q = round-to-nearest-even(x / d)) — a function of that row alone, so rows
// stay independent. A block's dot product is then exact integer arithmetic
//   isum_b = Σ_{j<32} qw[j] * qx[j]
// and the float part is y = Σ_b (dw_b * dx_b) * isum_b, accumulated in a fixed order:
//   x86 (AVX2 and up): isum_b as 8 int32 lanes (sums of 4 consecutive products, maddubs+madd),
//     converted to f32 and FMA'd lane-wise into one accumulator in block order; one horizontal
//     sum at the end;
//   other targets: scalar, block order.
// The GEMV (R = 1) and GEMM paths call the same non-inlined row kernel, so every output element
// sees the same operations whatever R, the other rows or the thread count (batch invariance).

#ifndef ES_CPU_KERNELS_MATMUL_QUANT_ONCE_
#define ES_CPU_KERNELS_MATMUL_QUANT_ONCE_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "edgeseek/core/dtype.h"
#include "edgeseek/quant/blocks.h"

namespace es::cpu {

inline bool QuantMatMulSupports(DType t) { return t == DType::kQ8_0 || t == DType::kQ4_0; }

// One activation row [K] -> int8 qs [K] and per-32-block scales d [K / 32] (K % 32 == 0).
inline void QuantizeActivationRow(const float* x, int64_t K, int8_t* qs, float* d) {
  for (int64_t b = 0; b < K / kQK; ++b) {
    const float* xb = x + b * kQK;
    float amax = 0.0f;
    bool finite = true;
    for (int j = 0; j < kQK; ++j) {
      amax = std::max(amax, std::fabs(xb[j]));
      finite = finite && std::isfinite(xb[j]);
    }
    if (!finite) {  // inf/NaN activations give NaN outputs, as the f32 product would
      d[b] = std::numeric_limits<float>::quiet_NaN();
      std::fill(qs + b * kQK, qs + (b + 1) * kQK, int8_t(0));
      continue;
    }
    const float db = amax / 127.0f;
    const float id = db != 0.0f ? 127.0f / amax : 0.0f;
    d[b] = db;
    for (int j = 0; j < kQK; ++j) qs[b * kQK + j] = int8_t(std::nearbyint(xb[j] * id));
  }
}

}  // namespace es::cpu
#endif  // ES_CPU_KERNELS_MATMUL_QUANT_ONCE_

#if defined(ES_CPU_KERNELS_MATMUL_QUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ES_CPU_KERNELS_MATMUL_QUANT_INL_H_
#undef ES_CPU_KERNELS_MATMUL_QUANT_INL_H_
#else
#define ES_CPU_KERNELS_MATMUL_QUANT_INL_H_
#endif

#include <cstddef>
#include <cstring>

#include "cpu/kernels/scratch.h"
#include "edgeseek/core/error.h"
#include "edgeseek/core/half.h"
#include "edgeseek/core/thread_pool.h"
#include "hwy/highway.h"

#undef ES_QUANT_X86
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#include <immintrin.h>
#define ES_QUANT_X86 1
#else
#define ES_QUANT_X86 0
#endif

HWY_BEFORE_NAMESPACE();
namespace es::cpu {
namespace HWY_NAMESPACE {

// ---------------------------------------------------------------------------------------------
// Weight blocks: the 32 signed quants of block b, and its scale.

#if ES_QUANT_X86
HWY_INLINE __m256i LoadQuants(const BlockQ8_0& blk) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs));
}
// Q4_0: low nibbles are elements 0..15, high nibbles 16..31; minus 8.
HWY_INLINE __m256i LoadQuants(const BlockQ4_0& blk) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(b, m);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
  return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
}
HWY_INLINE float BlockScale(uint16_t d) { return _cvtsh_ss(d); }

// Σ w·x over a block as 8 f32 lanes (lane i: products 4i..4i+3, exact int32 before conversion).
// maddubs wants unsigned × signed: |w| × (x with w's sign); |w| <= 128 and |x| <= 127 keep the
// int16 pair sums below 32767.
HWY_INLINE __m256 BlockDot(__m256i w, __m256i x) {
  const __m256i aw = _mm256_sign_epi8(w, w);
  const __m256i sx = _mm256_sign_epi8(x, w);
  const __m256i p16 = _mm256_maddubs_epi16(aw, sx);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

HWY_INLINE float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#else
HWY_INLINE void LoadQuants(const BlockQ8_0& blk, int8_t* q) { std::memcpy(q, blk.qs, kQK); }
HWY_INLINE void LoadQuants(const BlockQ4_0& blk, int8_t* q) {
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = int8_t((blk.qs[j] & 0x0F) - 8);
    q[j + kQK / 2] = int8_t((blk.qs[j] >> 4) - 8);
  }
}
HWY_INLINE float BlockScale(uint16_t d) { return F16ToF32(d); }
#endif

// ---------------------------------------------------------------------------------------------
// Row kernel: NR output columns of one quantized activation row.
//   xq: [nb * 32] int8, xd: [nb] f32 scales
//   w:  NR rows of nb blocks, row stride w_stride blocks
//   out: [NR] dot products (before bias)
// Not inlined: GEMV and GEMM run this very code, which is what makes them agree bit for bit.

template <int NR, class Block>
HWY_NOINLINE void QuantDotRows(const int8_t* HWY_RESTRICT xq, const float* HWY_RESTRICT xd,
                               size_t nb, const Block* HWY_RESTRICT w, size_t w_stride,
                               float* HWY_RESTRICT out) {
#if ES_QUANT_X86
  __m256 acc[NR];
  for (int c = 0; c < NR; ++c) acc[c] = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * kQK));
    const float dx = xd[b];
    for (int c = 0; c < NR; ++c) {
      const Block& blk = w[c * w_stride + b];
      const __m256 scale = _mm256_set1_ps(BlockScale(blk.d) * dx);
      acc[c] = _mm256_fmadd_ps(scale, BlockDot(LoadQuants(blk), xv), acc[c]);
    }
  }
  for (int c = 0; c < NR; ++c) out[c] = HorizontalSum(acc[c]);
#else
  for (int c = 0; c < NR; ++c) {
    float acc = 0.0f;
    for (size_t b = 0; b < nb; ++b) {
      const Block& blk = w[c * w_stride + b];
      int8_t q[kQK];
      LoadQuants(blk, q);
      int32_t isum = 0;
      for (int j = 0; j < kQK; ++j) isum += int32_t(q[j]) * int32_t(xq[b * kQK + j]);
      acc += BlockScale(blk.d) * xd[b] * float(isum);
    }
    out[c] = acc;
  }
#endif
}

// ---------------------------------------------------------------------------------------------
// Driver: quantize the activation rows (in parallel over rows), then one task per (column block,
// row block); inside a task, columns in groups of kQuantCols (their weight rows stay in L1) and
// every row of the block against each group.

constexpr size_t kQuantCols = 4;
constexpr size_t kQuantNC = 32;  // columns per task
constexpr size_t kQuantRC = 32;  // rows per task

template <class Block>
void QuantMatMulT(const float* x, size_t R, size_t K, const Block* w, size_t N, const float* bias,
                  float* y, size_t ldy, ThreadPool& pool) {
  const size_t nb = K / kQK;
  // Scratch: R rows of K int8 quants, then R * nb f32 scales.
  const size_t q_floats = (R * K + sizeof(float) - 1) / sizeof(float);
  float* buf = ThreadScratch(1).Floats(std::max<size_t>(1, q_floats + R * nb));
  int8_t* xq = reinterpret_cast<int8_t*>(buf);
  float* xd = buf + q_floats;
  pool.ParallelFor(int64_t(R), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      QuantizeActivationRow(x + r * int64_t(K), int64_t(K), xq + size_t(r) * K, xd + size_t(r) * nb);
    }
  });
  const size_t row_blocks = (R + kQuantRC - 1) / kQuantRC;
  const size_t col_blocks = (N + kQuantNC - 1) / kQuantNC;
  pool.ParallelFor(int64_t(row_blocks * col_blocks), [&](int64_t t0, int64_t t1, int) {
    float out[kQuantCols];
    for (size_t t = size_t(t0); t < size_t(t1); ++t) {
      const size_t n0 = (t / row_blocks) * kQuantNC, r0 = (t % row_blocks) * kQuantRC;
      const size_t n1 = std::min(N, n0 + kQuantNC), r1 = std::min(R, r0 + kQuantRC);
      for (size_t n = n0; n < n1; n += kQuantCols) {
        const size_t nc = std::min(kQuantCols, n1 - n);
        for (size_t r = r0; r < r1; ++r) {
          const int8_t* xr = xq + r * K;
          const float* dr = xd + r * nb;
          if (nc == kQuantCols) {
            QuantDotRows<kQuantCols>(xr, dr, nb, w + n * nb, nb, out);
          } else {
            for (size_t c = 0; c < nc; ++c) QuantDotRows<1>(xr, dr, nb, w + (n + c) * nb, nb, out + c);
          }
          for (size_t c = 0; c < nc; ++c) y[r * ldy + n + c] = out[c] + (bias ? bias[n + c] : 0.0f);
        }
      }
    }
  });
}

inline void QuantMatMul(const float* x, int64_t R, int64_t K, const void* w, DType wtype,
                        int64_t N, const float* bias, float* y, int64_t ldy, ThreadPool& pool) {
  switch (wtype) {
    case DType::kQ8_0:
      return QuantMatMulT(x, size_t(R), size_t(K), static_cast<const BlockQ8_0*>(w), size_t(N),
                          bias, y, size_t(ldy), pool);
    case DType::kQ4_0:
      return QuantMatMulT(x, size_t(R), size_t(K), static_cast<const BlockQ4_0*>(w), size_t(N),
                          bias, y, size_t(ldy), pool);
    default:
      Fail("MatMul: weight type ", Name(wtype), " is not supported by the CPU kernels");
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace es::cpu
HWY_AFTER_NAMESPACE();

#endif  // ES_CPU_KERNELS_MATMUL_QUANT_INL_H_ toggle
