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
#include <functional>

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

// The epilogue of MatMulEpi / MatMulPairEpi: epi(r0, r1, n0, n1) once the outputs y[r0..r1) ×
// [n0..n1) (a pair: ya's and yb's) are final, called by the thread that wrote them right after it
// wrote them (still in its cache), inside the kernel's own parallel region — no region or pass of
// its own. Each output is in exactly one call; calls run concurrently on distinct outputs. It may
// rewrite those outputs (e.g. add a residual, or ya = silu(ya) · yb) and nothing else of y. The
// x86 column-lane types (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K) call it per group of 8 columns (R <= 4)
// or per GEMM task; the others (and ARM64) run the matmul, then the epilogue as one region over
// column ranges. Column indices are the call's (0 = w's first row).
using MatMulEpilogue = std::function<void(int64_t r0, int64_t r1, int64_t n0, int64_t n1)>;

// MatMul, then epi on every output (see MatMulEpilogue); y's bits before epi are MatMul's.
void MatMulEpi(const float* x, int64_t R, int64_t K, const void* w, DType wtype, int64_t N,
               const float* bias, float* y, int64_t ldy, const MatMulEpilogue& epi,
               ThreadPool& pool);

// MatMulPair, then epi on every output (of both); ya and yb before epi have MatMulPair's bits.
// The x86 column-lane types compute a column group of ya and then of yb in one region (one
// quantized x), so epi sees both.
void MatMulPairEpi(const float* x, int64_t R, int64_t K, const void* wa, const void* wb,
                   DType wtype, int64_t N, float* ya, float* yb, int64_t ldy,
                   const MatMulEpilogue& epi, ThreadPool& pool);

// Whether MatMul handles weights of this type.
bool MatMulSupports(DType wtype);

// The SIMD target chosen at run time, e.g. "AVX2", "AVX3" (AVX-512), "NEON", "EMU128".
const char* SimdTargetName();

}  // namespace es::cpu
