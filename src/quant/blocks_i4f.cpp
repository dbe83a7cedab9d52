// I4F: edgeseek's INT4 block with an f32 scale and a 4-bit zero point per 32 weights
// (include/edgeseek/internal/quant/blocks.h), the exact home of onnxruntime's MatMulNBits
// 4-bit weights of f32 models (src/quant/nbits.cpp maps those without requantizing).
#include <algorithm>
#include <cstring>

#include "edgeseek/internal/quant/blocks.h"
#include "quant_util.h"

namespace es::quant {

// Asymmetric min/max over the block with 0 kept representable, as onnxruntime's blockwise
// 4-bit quantizer does: lo = min(0, min x), hi = max(0, max x), d = (hi - lo) / 15,
// z = clamp(round(-lo / d), 0, 15), q = clamp(round(x / d) + z, 0, 15).
void QuantizeI4F(const float* x, void* vy, int64_t nb) {
  auto* y = static_cast<BlockI4F*>(vy);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float lo = 0.0f, hi = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      lo = std::min(lo, x[j]);
      hi = std::max(hi, x[j]);
    }
    BlockI4F& b = y[i];
    std::memset(&b, 0, sizeof(b));
    b.d = (hi - lo) / 15.0f;
    const float id = b.d != 0.0f ? 1.0f / b.d : 0.0f;
    const int z = std::clamp(NearestInt(-lo * id), 0, 15);
    b.z = uint8_t(z);
    int q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = std::clamp(NearestInt(x[j] * id) + z, 0, 15);
    for (int j = 0; j < kQK / 2; ++j) b.qs[j] = uint8_t(q[j] | q[j + kQK / 2] << 4);
  }
}

void DequantizeI4F(const void* vx, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockI4F*>(vx);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = x[i].d;
    const int z = x[i].z;
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float((x[i].qs[j] & 0xF) - z) * d;
      y[j + kQK / 2] = float((x[i].qs[j] >> 4) - z) * d;
    }
  }
}

}  // namespace es::quant
