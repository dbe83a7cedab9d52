// CPU matmul: argument checks, the choice of path per shape and weight type, and run-time SIMD
// dispatch. Highway compiles the per-target part of this file once per target (foreach_target.h)
// and HWY_DYNAMIC_DISPATCH picks the best one the CPU supports, so one portable binary runs AVX2,
// AVX-512, NEON or SVE code. The SIMD loops live in matmul-inl.h (dense), matmul_quant-inl.h
// (block-quantized, int8 activations) and matmul_i4f-inl.h (I4F, f32 activations).
//
// Policy: R == 1 (decode) is a GEMV that streams each weight row once, converting in registers;
// R > 1 (prefill, batched decode) is the blocked GEMM over f32 panels. Both give every output
// element the same reduction order (see matmul-inl.h), so the choice never changes a bit of y.

// AVX3_DL (AVX-512 with VNNI) is compiled in addition to Highway's default targets: the
// quantized kernels use vpdpbusd / vpdpwssd there (matmul_quant-inl.h).
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL 1
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels/matmul.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// clang-format off
#include "hwy/highway.h"
#include "cpu/kernels/matmul-inl.h"
#include "cpu/kernels/matmul_quant-inl.h"
#include "cpu/kernels/matmul_i4f-inl.h"
// clang-format on

#include "cpu/kernels/matmul.h"
#include "edgeseek/internal/core/error.h"
#if HWY_ONCE && HWY_ARCH_ARM_A64
#include <map>
#include <mutex>
#include <string>

#include "cpu/kernels/matmul_quant_arm.h"
#endif

HWY_BEFORE_NAMESPACE();
namespace es::cpu {
namespace HWY_NAMESPACE {

template <class WT>
void DenseT(const float* x, size_t R, size_t K, const void* w, size_t N, const float* bias,
            float* y, size_t ldy, ThreadPool& pool, const MatMulEpilogue* epi) {
  const WT* wt = static_cast<const WT*>(w);
  if (R == 1) {
    Gemv(x, K, wt, N, bias, y, pool, epi);
  } else {
    Gemm(x, R, K, wt, N, bias, y, ldy, pool, epi);
  }
}

// epi: MatMulEpilogue, or null.
void MatMulT(const float* x, int64_t R, int64_t K, const void* w, DType wtype, int64_t N,
             const float* bias, float* y, int64_t ldy, ThreadPool& pool,
             const MatMulEpilogue* epi) {
  switch (wtype) {
    case DType::kF32:
      return DenseT<float>(x, R, K, w, N, bias, y, ldy, pool, epi);
    case DType::kF16:
      return DenseT<hwy::float16_t>(x, R, K, w, N, bias, y, ldy, pool, epi);
    case DType::kBF16:
      return DenseT<hwy::bfloat16_t>(x, R, K, w, N, bias, y, ldy, pool, epi);
    case DType::kI4F:  // f32 activations (matmul_i4f-inl.h)
      return I4FMatMul(x, size_t(R), size_t(K), static_cast<const BlockI4F*>(w), size_t(N), bias, y,
                       size_t(ldy), pool, epi);
    default:
      return QuantMatMul(x, R, K, w, wtype, N, bias, y, ldy, pool, epi);
  }
}

void MatMulPairT(const float* x, int64_t R, int64_t K, const void* wa, const void* wb, DType wtype,
                 int64_t N, float* ya, float* yb, int64_t ldy, ThreadPool& pool,
                 const MatMulEpilogue* epi) {
  switch (wtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kI4F:  // f32 activations: nothing to share
      MatMulT(x, R, K, wa, wtype, N, nullptr, ya, ldy, pool, nullptr);
      MatMulT(x, R, K, wb, wtype, N, nullptr, yb, ldy, pool, nullptr);
      if (epi) EpilogueRegion(size_t(R), size_t(N), *epi, pool);
      return;
    default:
      return QuantMatMulPair(x, R, K, wa, wb, wtype, N, ya, yb, ldy, pool, epi);
  }
}

int64_t ChosenTarget() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace es::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace es::cpu {

HWY_EXPORT(MatMulT);
HWY_EXPORT(MatMulPairT);
HWY_EXPORT(ChosenTarget);

bool MatMulSupports(DType wtype) {
  switch (wtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kI4F:
      return true;
    default:
      return QuantMatMulSupports(wtype);
  }
}

namespace {

// The argument checks of the entry points (`what`: the caller's name in the message).
void CheckShape(const char* what, DType wtype, int64_t R, int64_t K, int64_t N, int64_t ldy) {
  ES_CHECK(MatMulSupports(wtype), what, ": weight type ", Name(wtype),
           " is not supported by the CPU kernels");
  ES_CHECK(R >= 0 && K >= 0 && N >= 0, what, ": negative shape R=", R, " K=", K, " N=", N);
  ES_CHECK(ldy >= N, what, ": ldy=", ldy, " is smaller than N=", N);
  ES_CHECK(K % BlockElems(wtype) == 0, what, ": K=", K, " is not a multiple of the ", Name(wtype),
           " block size ", BlockElems(wtype));
}

}  // namespace

void MatMul(const float* x, int64_t R, int64_t K, const void* w, DType wtype, int64_t N,
            const float* bias, float* y, int64_t ldy, ThreadPool& pool) {
  CheckShape("MatMul", wtype, R, K, N, ldy);
  if (R == 0 || N == 0) return;
  HWY_DYNAMIC_DISPATCH(MatMulT)(x, R, K, w, wtype, N, bias, y, ldy, pool, nullptr);
}

void MatMulEpi(const float* x, int64_t R, int64_t K, const void* w, DType wtype, int64_t N,
               const float* bias, float* y, int64_t ldy, const MatMulEpilogue& epi,
               ThreadPool& pool) {
  CheckShape("MatMulEpi", wtype, R, K, N, ldy);
  ES_CHECK(bool(epi), "MatMulEpi: no epilogue (MatMul runs none)");
  if (R == 0 || N == 0) return;
  HWY_DYNAMIC_DISPATCH(MatMulT)(x, R, K, w, wtype, N, bias, y, ldy, pool, &epi);
}

void MatMulPair(const float* x, int64_t R, int64_t K, const void* wa, const void* wb, DType wtype,
                int64_t N, float* ya, float* yb, int64_t ldy, ThreadPool& pool) {
  CheckShape("MatMulPair", wtype, R, K, N, ldy);
  if (R == 0 || N == 0) return;
  HWY_DYNAMIC_DISPATCH(MatMulPairT)(x, R, K, wa, wb, wtype, N, ya, yb, ldy, pool, nullptr);
}

void MatMulPairEpi(const float* x, int64_t R, int64_t K, const void* wa, const void* wb,
                   DType wtype, int64_t N, float* ya, float* yb, int64_t ldy,
                   const MatMulEpilogue& epi, ThreadPool& pool) {
  CheckShape("MatMulPairEpi", wtype, R, K, N, ldy);
  ES_CHECK(bool(epi), "MatMulPairEpi: no epilogue (MatMulPair runs none)");
  if (R == 0 || N == 0) return;
  HWY_DYNAMIC_DISPATCH(MatMulPairT)(x, R, K, wa, wb, wtype, N, ya, yb, ldy, pool, &epi);
}

const char* SimdTargetName() {
  const int64_t target = HWY_DYNAMIC_DISPATCH(ChosenTarget)();
#if HWY_ARCH_ARM_A64
  // ARM64: the Highway target (dense kernels), then the integer path of the quantized kernels,
  // e.g. "SVE2, int8 NEON+dotprod+i8mm". One string per target, kept for the process.
  static std::mutex mu;
  static std::map<int64_t, std::string> names;
  std::lock_guard<std::mutex> lock(mu);
  auto it = names.find(target);
  if (it == names.end()) {
    it = names
             .emplace(target, std::string(hwy::TargetName(target)) + ", int8 " +
                                  ArmQuantPathName(ArmQuantPathActive()))
             .first;
  }
  return it->second.c_str();
#else
  return hwy::TargetName(target);
#endif
}

}  // namespace es::cpu
#endif  // HWY_ONCE
