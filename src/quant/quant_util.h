// Private helpers shared by the scalar quantizers: rounding as llama.cpp's references round, and
// the per-type entry points that quantize.cpp dispatches to.
#pragma once

#include <cmath>
#include <cstdint>

namespace es::quant {

// Round to nearest, ties to even (what llama.cpp's nearest_int does with its 1.5*2^23 trick for
// |x| < 2^22; std::nearbyint under the default rounding mode gives the same integers).
inline int NearestInt(float x) { return int(std::nearbyint(x)); }

// Legacy 32-element blocks (blocks_legacy.cpp) and I4G.
void QuantizeQ8_0(const float* x, void* y, int64_t nblocks);
void QuantizeQ4_0(const float* x, void* y, int64_t nblocks);
void QuantizeQ4_1(const float* x, void* y, int64_t nblocks);
void QuantizeQ5_0(const float* x, void* y, int64_t nblocks);
void QuantizeQ5_1(const float* x, void* y, int64_t nblocks);
void QuantizeI4G(const float* x, void* y, int64_t nblocks);
void DequantizeQ8_0(const void* x, float* y, int64_t nblocks);
void DequantizeQ4_0(const void* x, float* y, int64_t nblocks);
void DequantizeQ4_1(const void* x, float* y, int64_t nblocks);
void DequantizeQ5_0(const void* x, float* y, int64_t nblocks);
void DequantizeQ5_1(const void* x, float* y, int64_t nblocks);
void DequantizeI4G(const void* x, float* y, int64_t nblocks);

// I4F (blocks_i4f.cpp).
void QuantizeI4F(const float* x, void* y, int64_t nblocks);
void DequantizeI4F(const void* x, float* y, int64_t nblocks);

// K-quant super-blocks of 256 (blocks_kquants.cpp).
void QuantizeQ4K(const float* x, void* y, int64_t nblocks);
void QuantizeQ5K(const float* x, void* y, int64_t nblocks);
void QuantizeQ6K(const float* x, void* y, int64_t nblocks);
void QuantizeQ8K(const float* x, void* y, int64_t nblocks);
void DequantizeQ4K(const void* x, float* y, int64_t nblocks);
void DequantizeQ5K(const void* x, float* y, int64_t nblocks);
void DequantizeQ6K(const void* x, float* y, int64_t nblocks);
void DequantizeQ8K(const void* x, float* y, int64_t nblocks);

}  // namespace es::quant
