// Weights repacked once at load into the layout the x86 column-lane kernels read
// (matmul_lanes-inl.h): Q4_0 and Q8_0 as groups of 8 columns whose blocks are interleaved the way
// the GEMM panel holds them, scales gathered as 8 contiguous f16 — the same bytes as the raw rows,
// read as one contiguous stream per group, with no per-call interleave and no shuffles.
//
//   y[r, n] = sum_k x[r, k] * W[n, k]  (+ bias[n])   — bit-identical to MatMul on the raw W.
//
// Only where the dispatched SIMD target has those kernels (x86, AVX2 and up); elsewhere
// RepackSupports is false and the raw layout stays (MatMul, matmul.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "edgeseek/internal/core/dtype.h"
#include "edgeseek/internal/core/thread_pool.h"

namespace es::cpu {

// A repacked weight: N rows (output columns) of K elements of `type`. Owns its bytes.
struct PackedWeight {
  DType type = DType::kF32;
  int64_t N = 0, K = 0;
  size_t bytes = 0;
  // Owned; 2 MiB aligned and advised as transparent huge pages (MADV_HUGEPAGE): a decode step
  // streams every weight once, and 4 KiB pages would cost a TLB miss every 4 KiB of it.
  std::shared_ptr<uint8_t> data;
};

// Whether weights of `type` have a repacked layout on this CPU's SIMD target.
bool RepackSupports(DType type);

// The repacked copy of w (N rows of K elements of `type`, K a multiple of 32, row stride
// RowBytes(type, K)), made over the pool's threads. Requires RepackSupports(type).
PackedWeight Repack(const void* w, DType type, int64_t N, int64_t K, ThreadPool& pool);

// y = x · Wᵀ (+ bias) from repacked weights; x: f32 [R, K], y: [R, N] with row stride ldy.
// The same checks, reduction order and batch invariance as MatMul; epi (or null): a
// MatMulEpilogue (matmul.h; its type spelled out, this header is read where matmul.h's include
// path is not), called as MatMulEpi calls it, in the kernels' own regions.
void PackedMatMul(
    const float* x, int64_t R, const PackedWeight& w, const float* bias, float* y, int64_t ldy,
    ThreadPool& pool,
    const std::function<void(int64_t r0, int64_t r1, int64_t n0, int64_t n1)>* epi = nullptr);

}  // namespace es::cpu
