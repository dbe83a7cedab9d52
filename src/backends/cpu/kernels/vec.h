// Small vector kernels for attention inner loops (run-time SIMD dispatch through Highway).
// Each result depends only on its own inputs and n (fixed lane-wise reduction order), so rows
// stay batch-invariant.
#pragma once

#include <cstdint>

namespace es::cpu {

// Σ a[i]·b[i] over f32 arrays (no alignment needed).
float Dot(const float* a, const float* b, int64_t n);
// y[i] += w·x[i].
void Axpy(float w, const float* x, float* y, int64_t n);
// out[g] = Dot(a + g·lda, b, n) for g in [0, G): several rows (attention heads) against one row b,
// which is loaded once per group of 4; each out[g] is bit-identical to Dot's.
void DotRows(const float* a, int64_t lda, int64_t G, const float* b, int64_t n, float* out);
// y[g·ldy + i] += w[g]·x[i] for g in [0, G): one row x into several (heads' outputs), x loaded
// once per group of 4; each row bit-identical to Axpy's.
void AxpyRows(const float* w, const float* x, float* y, int64_t ldy, int64_t G, int64_t n);

}  // namespace es::cpu
