// Scalar reference (de)quantizers for the K-quant super-blocks (256 elements): Q4_K, Q5_K,
// Q6_K and the activation type Q8_K. The scale searches are the algorithms of llama.cpp's
// reference quantizers, written from their description:
//  - Q4_K / Q5_K ("make_qkx2_quants"): per 32-element sub-block, an asymmetric (scale, min)
//    fit. Start from scale = (max - min) / nmax with min clamped to <= 0; then for nstep+1
//    candidate inverse scales (rmin + rdelta * is + nmax) / (max - min), quantize, solve the
//    weighted least-squares problem for (scale, min) in closed form, and keep the candidate with
//    the smallest weighted squared error. Weights are rms(sub-block) + |x|. The 8 scales and 8
//    mins are then themselves quantized to 6 bits against the super-block's f16 d and dmin, and
//    the levels recomputed with the stored (rounded) scales.
//  - Q6_K ("make_qx_quants", rmse_type 1): per 16-element sub-block, a symmetric signed scale
//    search over 19 inverse scales -(nmax + 0.1 is) / max, weights x^2, keeping the one that
//    maximises (sum w x l)^2 / sum w l^2; the 16 scales are stored as int8 against an f16 d.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/quant/blocks.h"
#include "quant_util.h"

namespace es {

namespace quant {
namespace {

constexpr float kGroupMaxEps = 1e-15f;

// Asymmetric fit of n values to levels 0..nmax: x ≈ scale * L - min_out. Returns scale and
// writes the (positive) offset to *min_out and the levels to L.
float FitScaleMin(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out,
                  float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(L, 0, size_t(n));
    *min_out = -min;
    return 0.0f;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1.0f / iscale;
  float best_error = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
    L[i] = uint8_t(l);
    const float diff = scale * float(l) + min - x[i];
    best_error += w[i] * diff * diff;
  }
  uint8_t laux[32];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
      laux[i] = uint8_t(l);
      sum_l += w[i] * float(l);
      sum_l2 += w[i] * float(l * l);
      sum_xl += w[i] * float(l) * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float err = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * float(laux[i]) + this_min - x[i];
        err += w[i] * diff * diff;
      }
      if (err < best_error) {
        std::memcpy(L, laux, size_t(n));
        best_error = err;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *min_out = -min;
  return scale;
}

// Symmetric signed fit of n values to levels -nmax..nmax-1 (stored as L = level + nmax) with
// weights x^2. Returns the scale (may be negative: the sign follows the largest element).
float FitSignedScale(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, size_t(n));
    return 0.0f;
  }
  auto level = [&](float iscale, int i) {
    return std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
  };
  float iscale = -float(nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = level(iscale, i);
    L[i] = int8_t(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l * l);
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = level(iscale, i);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * float(l);
      suml2 += w * float(l * l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = int8_t(nmax + level(iscale, i));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Shared by Q4_K and Q5_K: fits the 8 sub-blocks, packs d/dmin/scales, and writes the final
// levels (0..nmax) for the 256 elements into L.
void FitK4Scales(const float* x, int nmax, float rmin, int nstep, uint16_t* d_out,
                 uint16_t* dmin_out, uint8_t* scales_out, uint8_t* L) {
  float scales[8], mins[8], weights[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = FitScaleMin(32, nmax, xs, weights, L + 32 * j, &mins[j], rmin, 0.1f, nstep);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  std::memset(scales_out, 0, 12);
  for (int j = 0; j < 8; ++j) {
    const int ls = std::min(63, NearestInt(inv_scale * scales[j]));
    const int lm = std::min(63, NearestInt(inv_min * mins[j]));
    if (j < 4) {
      scales_out[j] = uint8_t(ls);
      scales_out[j + 4] = uint8_t(lm);
    } else {
      scales_out[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
      scales_out[j - 4] |= uint8_t((ls >> 4) << 6);
      scales_out[j] |= uint8_t((lm >> 4) << 6);
    }
  }
  *d_out = F32ToF16(max_scale / 63.0f);
  *dmin_out = F32ToF16(max_min / 63.0f);
  const float d_all = F16ToF32(*d_out), dmin_all = F16ToF32(*dmin_out);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    UnpackScaleMinK4(j, scales_out, &sc, &m);
    const float d = d_all * float(sc);
    if (d == 0.0f) continue;
    const float dm = dmin_all * float(m);
    for (int ii = 0; ii < 32; ++ii)
      L[32 * j + ii] = uint8_t(std::clamp(NearestInt((x[32 * j + ii] + dm) / d), 0, nmax));
  }
}

}  // namespace

// ---- Q4_K
void QuantizeQ4K(const float* x, void* vy, int64_t nb) {
  auto* y = static_cast<BlockQ4_K*>(vy);
  uint8_t L[kQKK];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    FitK4Scales(x, 15, -1.0f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQKK; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
  }
}

void DequantizeQ4K(const void* vx, float* y, int64_t nb) {
  auto* x = static_cast<const BlockQ4_K*>(vx);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d), dmin = F16ToF32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc, m;
      UnpackScaleMinK4(2 * c, x[i].scales, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      UnpackScaleMinK4(2 * c + 1, x[i].scales, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

// ---- Q5_K
void QuantizeQ5K(const float* x, void* vy, int64_t nb) {
  auto* y = static_cast<BlockQ5_K*>(vy);
  uint8_t L[kQKK];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    FitK4Scales(x, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    uint8_t* ql = y[i].qs;
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < kQKK; n += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j], l2 = L[n + j + 32];
        if (l1 > 15) {
          l1 -= 16;
          y[i].qh[j] |= m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          y[i].qh[j] |= m2;
        }
        ql[j] = uint8_t(l1 | (l2 << 4));
      }
      m1 = uint8_t(m1 << 2);
      m2 = uint8_t(m2 << 2);
    }
  }
}

void DequantizeQ5K(const void* vx, float* y, int64_t nb) {
  auto* x = static_cast<const BlockQ5_K*>(vx);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d), dmin = F16ToF32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    for (int c = 0; c < 4; ++c, ql += 32) {
      uint8_t sc, m;
      UnpackScaleMinK4(2 * c, x[i].scales, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      UnpackScaleMinK4(2 * c + 1, x[i].scales, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      const uint8_t u1 = uint8_t(1u << (2 * c)), u2 = uint8_t(2u << (2 * c));
      for (int l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
  }
}

// ---- Q6_K. Element e of a 128-half h (e = 32 k + l, k in 0..3, l in 0..31) has its low 4 bits
// in ql[64 h + l + 32 (k & 1)] (low nibble for k < 2, high nibble for k >= 2) and its high 2
// bits at bit 2k of qh[32 h + l]; its scale is scales[8 h + 2 k + l / 16].
void QuantizeQ6K(const float* x, void* vy, int64_t nb) {
  auto* y = static_cast<BlockQ6_K*>(vy);
  int8_t L[kQKK];
  float scales[16];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
      scales[ib] = FitSignedScale(16, 32, x + 16 * ib, L + 16 * ib);
      if (std::fabs(scales[ib]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    std::memset(&y[i], 0, sizeof(BlockQ6_K));
    if (max_abs_scale < kGroupMaxEps) {
      y[i].d = F32ToF16(0.0f);
      continue;
    }
    const float iscale = -128.0f / max_scale;
    y[i].d = F32ToF16(1.0f / iscale);
    for (int ib = 0; ib < 16; ++ib)
      y[i].scales[ib] = int8_t(std::min(127, NearestInt(iscale * scales[ib])));
    const float d_all = F16ToF32(y[i].d);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * float(y[i].scales[j]);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii)
        L[16 * j + ii] = int8_t(std::clamp(NearestInt(x[16 * j + ii] / d), -32, 31) + 32);
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQKK; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
        ql[l] = uint8_t((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[l + 32] = uint8_t((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[l] = uint8_t((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
  }
}

void DequantizeQ6K(const void* vx, float* y, int64_t nb) {
  auto* x = static_cast<const BlockQ6_K*>(vx);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int h = 0; h < 2; ++h, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[is + 0]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
    }
  }
}

// ---- Q8_K: d = max / -127 (f32), q = min(127, round(x / d)); bsums for the K-quant dots.
void QuantizeQ8K(const float* x, void* vy, int64_t nb) {
  auto* y = static_cast<BlockQ8_K*>(vy);
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float max = 0, amax = 0;
    for (int j = 0; j < kQKK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    std::memset(&y[i], 0, sizeof(BlockQ8_K));
    if (amax == 0.0f) continue;
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQKK; ++j) y[i].qs[j] = int8_t(std::min(127, NearestInt(iscale * x[j])));
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * g + l];
      y[i].bsums[g] = int16_t(sum);
    }
    y[i].d = 1.0f / iscale;
  }
}

void DequantizeQ8K(const void* vx, float* y, int64_t nb) {
  auto* x = static_cast<const BlockQ8_K*>(vx);
  for (int64_t i = 0; i < nb; ++i)
    for (int j = 0; j < kQKK; ++j) *y++ = x[i].d * float(x[i].qs[j]);
}

}  // namespace quant
}  // namespace es
