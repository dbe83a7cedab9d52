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

}  // namespace es::cpu
