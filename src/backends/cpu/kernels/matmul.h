// CPU matrix multiplication over typed weights — the op that decides decode and prefill speed.
//
//   y[r, n] = sum_k x[r, k] * W[n, k]  (+ bias[n])     r < R, n < N, k < K
//
// x: f32 [R, K] row-major (row stride K); W: N rows of K elements of `wtype`, row stride
// RowBytes(wtype, K) (dense f32/f16/bf16 here; block-quantized types join through the same
// entry point); y: f32 [R, N] with row stride ldy (>= N).
//
// Batch invariance (a contract the server relies on): y's row r is bit-identical whatever R is
// and whatever the other rows hold — R = 1 (decode GEMV) and R = 512 (prefill GEMM) give each row
// the same reduction order. Work is split over the pool's threads by output columns (and row
// blocks), never by K.
#pragma once

#include <cstdint>

#include "edgeseek/internal/core/dtype.h"
#include "edgeseek/internal/core/thread_pool.h"

namespace es::cpu {

void MatMul(const float* x, int64_t R, int64_t K, const void* w, DType wtype, int64_t N,
            const float* bias, float* y, int64_t ldy, ThreadPool& pool);

// ya = x · Waᵀ and yb = x · Wbᵀ: two weights of one type and shape [N, K] read by one x (a
// gate/up pair), no bias, both outputs with row stride ldy. Block-quantized types whose x86
// kernels take int8/int16 activations (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K) quantize x once for both;
// every output has the bits MatMul gives it.
void MatMulPair(const float* x, int64_t R, int64_t K, const void* wa, const void* wb, DType wtype,
                int64_t N, float* ya, float* yb, int64_t ldy, ThreadPool& pool);

// Whether MatMul handles weights of this type.
bool MatMulSupports(DType wtype);

// The SIMD target chosen at run time, e.g. "AVX2", "AVX3" (AVX-512), "NEON", "EMU128".
const char* SimdTargetName();

}  // namespace es::cpu
