// Scalar reference (de)quantizers for the 32-element GGUF block types Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1 and edgeseek's 128-element I4G. The encoders follow the formulas of llama.cpp's
// reference quantizers (so that our files decode the same in llama.cpp); the layouts are in
// include/edgeseek/internal/quant/blocks.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/quant/blocks.h"
#include "quant_util.h"

namespace es::quant {
namespace {

// The element of largest magnitude, with its sign (the first one on ties).
float SignedAbsMax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void MinMax(const float* x, int n, float* mn, float* mx) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < n; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  *mn = lo;
  *mx = hi;
}

}  // namespace

// ---- Q8_0: d = absmax / 127, q = round(x / d) (half away from zero, as llama.cpp's roundf).
void QuantizeQ8_0(const float* x, void* vy, int64_t nb) {
  auto* y = static_cast<BlockQ8_0*>(vy);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = int8_t(std::round(x[j] * id));
  }
}

void DequantizeQ8_0(const void* vx, float* y, int64_t nb) {
  auto* x = static_cast<const BlockQ8_0*>(vx);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < kQK; ++j) *y++ = d * float(x[i].qs[j]);
  }
}

// ---- Q4_0: d = max / -8 (max = the signed value of largest magnitude, which maps to q = 0),
// q = min(15, trunc(x / d + 8.5)).
void QuantizeQ4_0(const float* x, void* vy, int64_t nb) {
  auto* y = static_cast<BlockQ4_0*>(vy);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float d = SignedAbsMax(x, kQK) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(15, int(x[j] * id + 8.5f));
      const int q1 = std::min(15, int(x[j + kQK / 2] * id + 8.5f));
      y[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void DequantizeQ4_0(const void* vx, float* y, int64_t nb) {
  auto* x = static_cast<const BlockQ4_0*>(vx);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float((x[i].qs[j] & 0xF) - 8) * d;
      y[j + kQK / 2] = float((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

// ---- Q4_1: d = (max - min) / 15, m = min, q = min(15, trunc((x - min) / d + 0.5)).
void QuantizeQ4_1(const float* x, void* vy, int64_t nb) {
  auto* y = static_cast<BlockQ4_1*>(vy);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float mn, mx;
    MinMax(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    y[i].m = F32ToF16(mn);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(15, int((x[j] - mn) * id + 0.5f));
      const int q1 = std::min(15, int((x[j + kQK / 2] - mn) * id + 0.5f));
      y[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void DequantizeQ4_1(const void* vx, float* y, int64_t nb) {
  auto* x = static_cast<const BlockQ4_1*>(vx);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d), m = F16ToF32(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float(x[i].qs[j] & 0xF) * d + m;
      y[j + kQK / 2] = float(x[i].qs[j] >> 4) * d + m;
    }
  }
}

// ---- Q5_0: d = max / -16, q = min(31, trunc(x / d + 16.5)); low 4 bits in qs, bit 4 in qh.
void QuantizeQ5_0(const float* x, void* vy, int64_t nb) {
  auto* y = static_cast<BlockQ5_0*>(vy);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float d = SignedAbsMax(x, kQK) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(31, int(x[j] * id + 16.5f));
      const int q1 = std::min(31, int(x[j + kQK / 2] * id + 16.5f));
      y[i].qs[j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= uint32_t((q0 >> 4) & 1) << j;
      qh |= uint32_t((q1 >> 4) & 1) << (j + kQK / 2);
    }
    for (int b = 0; b < 4; ++b) y[i].qh[b] = uint8_t(qh >> (8 * b));
  }
}

namespace {
uint32_t LoadQh(const uint8_t* qh) {
  return uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
}
}  // namespace

void DequantizeQ5_0(const void* vx, float* y, int64_t nb) {
  auto* x = static_cast<const BlockQ5_0*>(vx);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d);
    const uint32_t qh = LoadQh(x[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = (x[i].qs[j] & 0xF) | int((qh >> j) & 1) << 4;
      const int q1 = (x[i].qs[j] >> 4) | int((qh >> (j + kQK / 2)) & 1) << 4;
      y[j] = float(q0 - 16) * d;
      y[j + kQK / 2] = float(q1 - 16) * d;
    }
  }
}

// ---- Q5_1: d = (max - min) / 31, m = min, q = trunc((x - min) / d + 0.5).
void QuantizeQ5_1(const float* x, void* vy, int64_t nb) {
  auto* y = static_cast<BlockQ5_1*>(vy);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float mn, mx;
    MinMax(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    y[i].m = F32ToF16(mn);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(31, int((x[j] - mn) * id + 0.5f));
      const int q1 = std::min(31, int((x[j + kQK / 2] - mn) * id + 0.5f));
      y[i].qs[j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= uint32_t((q0 >> 4) & 1) << j;
      qh |= uint32_t((q1 >> 4) & 1) << (j + kQK / 2);
    }
    for (int b = 0; b < 4; ++b) y[i].qh[b] = uint8_t(qh >> (8 * b));
  }
}

void DequantizeQ5_1(const void* vx, float* y, int64_t nb) {
  auto* x = static_cast<const BlockQ5_1*>(vx);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d), m = F16ToF32(x[i].m);
    const uint32_t qh = LoadQh(x[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = (x[i].qs[j] & 0xF) | int((qh >> j) & 1) << 4;
      const int q1 = (x[i].qs[j] >> 4) | int((qh >> (j + kQK / 2)) & 1) << 4;
      y[j] = float(q0) * d + m;
      y[j + kQK / 2] = float(q1) * d + m;
    }
  }
}

// ---- I4G: symmetric int4 over 128 weights, one f16 scale. The scale is chosen by a small
// search that minimises the squared error: for 19 candidate inverse scales around
// -8 / max (max = signed value of largest magnitude), the levels l = clamp(round(x * iscale),
// -8, 7) are formed and the least-squares scale sum(x l) / sum(l l) scored by the error it
// leaves (larger sum(x l)^2 / sum(l l) = smaller error). The levels are then recomputed with
// the f16-rounded scale, so that what is stored is exactly what decodes best.
void QuantizeI4G(const float* x, void* vy, int64_t nb) {
  auto* y = static_cast<BlockI4G*>(vy);
  constexpr int n = kQKI4G;
  for (int64_t i = 0; i < nb; ++i, x += n) {
    const float max = SignedAbsMax(x, n);
    std::memset(y[i].qs, 0, sizeof(y[i].qs));
    if (max == 0.0f) {
      y[i].d = F32ToF16(0.0f);
      for (int j = 0; j < n / 2; ++j) y[i].qs[j] = 0x88;  // level 0 in both nibbles
      continue;
    }
    float best_score = -1.0f, best_scale = 0.0f;
    for (int is = -9; is <= 9; ++is) {
      const float iscale = -(8.0f + 0.1f * float(is)) / max;
      float sumlx = 0.0f, suml2 = 0.0f;
      for (int j = 0; j < n; ++j) {
        const int l = std::clamp(NearestInt(iscale * x[j]), -8, 7);
        sumlx += x[j] * float(l);
        suml2 += float(l * l);
      }
      if (suml2 > 0.0f && sumlx * sumlx / suml2 > best_score) {
        best_score = sumlx * sumlx / suml2;
        best_scale = sumlx / suml2;
      }
    }
    y[i].d = F32ToF16(best_scale);
    const float d = F16ToF32(y[i].d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < n; ++j) {
      const int q = std::clamp(NearestInt(x[j] * id), -8, 7) + 8;
      y[i].qs[j / 2] |= uint8_t(q << ((j & 1) * 4));
    }
  }
}

void DequantizeI4G(const void* vx, float* y, int64_t nb) {
  auto* x = static_cast<const BlockI4G*>(vx);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < kQKI4G / 2; ++j) {
      *y++ = float((x[i].qs[j] & 0xF) - 8) * d;
      *y++ = float((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

}  // namespace es::quant
