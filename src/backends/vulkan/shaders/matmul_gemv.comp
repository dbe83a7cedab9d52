#version 450
// Matrix-vector product for decode (few rows): y = x Wᵀ (+ bias), optionally per head.
//   W: rows [H*N, K] of the weight type (this dispatch's chunk); x: rows with strides;
//   y[r*y_rs + h*y_hs + y_off + n0 + n] = Σ_k W[h*N + n, k] x[r*x_rs + h*x_hs + x_off + k]
//                                         (+ bias[n0 + n])
// A workgroup computes ROWS outputs n for up to RB batch rows r; TPR = WG / ROWS invocations
// share one output (a multiple of the subgroup size, chosen by the host), reduced with
// subgroupAdd and one shared-memory step. VEC reads 8 weights per load and x as vec4 (K % 8 == 0,
// x offsets and strides % 4 == 0).
// Fused epilogues (decode): p.epi == 1 adds res[...] (indexed as y: the residual stream) to each
// output; DUAL (VEC only) binds two weights of the same shape (gate, up) and writes
// silu(x Wgᵀ) * (x Wuᵀ), the SwiGLU of the FFN, in one pass over x. Folded RMSNorm (VEC,
// p.norm == 1): x is the norm's input; the dot products use x ⊙ g (binding 5, the norm weight)
// and are scaled by 1 / sqrt(mean(x²) + eps), the sum of squares taken by the same workgroup.
#include "common.glsl"
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 128;
layout(constant_id = 1) const uint ROWS = 4;
const uint RB = 8;
const uint TPR = WG / ROWS;
#if defined(DUAL)
layout(binding = 0) readonly buffer W { uvec4 wq[]; } wb[2];  // gate, up
uint wsel = 0;
#define QUAD(i) wb[wsel].wq[i]
#define WORD(i) wb[wsel].wq[(i) >> 2][(i) & 3u]
#elif defined(VEC)
layout(binding = 0) readonly buffer W { uvec4 wq[]; };
#define QUAD(i) wq[i]
#define WORD(i) wq[(i) >> 2][(i) & 3u]
#else
layout(binding = 0) readonly buffer W { uint w[]; };
#define WORD(i) w[i]
#endif
#ifdef VEC
layout(binding = 1) readonly buffer X { vec4 x4[]; };  // x offsets and strides % 4 == 0
#else
layout(binding = 1) readonly buffer X { float x[]; };
#endif
layout(binding = 2) readonly buffer Bias { float bias[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };
layout(binding = 4) readonly buffer Res { float res[]; };
#ifdef VEC
layout(binding = 5) readonly buffer G { vec4 g4[]; };
#endif
layout(push_constant) uniform P {
  uint K, N, R, n0, x_rs, x_hs, x_off, y_rs, y_hs, y_off, has_bias, epi, norm;
  float eps;
} p;
#ifdef VEC
// x[row, 4 k4 ..] (xo: the row's first vec4), times the norm weight when folding a norm.
vec4 XL(uint xo, uint k4) { return p.norm != 0u ? x4[xo + k4] * g4[k4] : x4[xo + k4]; }
#endif
#define WCOLS p.K
#include "wload.glsl"
shared float part[RB][64];
shared float part_ss[RB][64];
#ifdef DUAL
shared float part2[RB][64];
#endif

#if defined(VEC) && defined(W_QUANT)
// Quantized rows (wload.glsl's repacked layout): whole 32-element blocks per invocation, two in
// flight per step: quants as one (Q4_0) or two (Q8_0) uvec4 loads, f16 scales, x as 8 vec4.
vec4 Nib4(uint w, uint sh) {  // 4 nibbles (bits sh..sh+3 of each byte) of w, minus 8
  return vec4(float((w >> sh) & 15u), float((w >> (sh + 8u)) & 15u), float((w >> (sh + 16u)) & 15u),
              float((w >> (sh + 24u)) & 15u)) - 8.0;
}
vec4 Byte4(uint w) {  // 4 signed bytes of w
  return vec4(float(int(w << 24) >> 24), float(int(w << 16) >> 24), float(int(w << 8) >> 24),
              float(int(w) >> 24));
}
// Dequantized weights of block b of the row at `base` (words) as 8 vec4 (elements 0..31).
void QBlock(uint base, uint b, out vec4 w[8]) {
#if defined(W_Q4_0)
  const uvec4 qv = QUAD((base + b * 4u) / 4u);
  // Elements 0..15: low nibbles of bytes 0..15 (words x, y, z, w); 16..31: high nibbles.
  w[0] = Nib4(qv.x, 0u); w[1] = Nib4(qv.y, 0u); w[2] = Nib4(qv.z, 0u); w[3] = Nib4(qv.w, 0u);
  w[4] = Nib4(qv.x, 4u); w[5] = Nib4(qv.y, 4u); w[6] = Nib4(qv.z, 4u); w[7] = Nib4(qv.w, 4u);
#else
  const uvec4 qa = QUAD((base + b * 8u) / 4u), qb = QUAD((base + b * 8u) / 4u + 1u);
  w[0] = Byte4(qa.x); w[1] = Byte4(qa.y); w[2] = Byte4(qa.z); w[3] = Byte4(qa.w);
  w[4] = Byte4(qb.x); w[5] = Byte4(qb.y); w[6] = Byte4(qb.z); w[7] = Byte4(qb.w);
#endif
}
void QDot(const vec4 w[8], float d, uint b, uint xb, uint nr, inout float acc[RB]) {
  for (uint r = 0; r < RB; ++r) {
    if (r < nr) {
      const uint xo = (xb + r * p.x_rs) / 4u, k4 = b * 8u;
      float s = 0.0;
      for (uint j = 0; j < 8u; ++j) s += dot(w[j], XL(xo, k4 + j));
      acc[r] += d * s;
    }
  }
}
void AccumVec(uint wrow, uint xb, uint nr, uint lane, inout float acc[RB]) {
  const uint K = p.K, nb = K / 32u, row = wrow / K;
  const uint base = row * QRowWords(K);  // words; a multiple of 4
  uint b = lane;
  for (; b + TPR < nb; b += 2u * TPR) {  // two blocks in flight per invocation
    vec4 w[8], u[8];
    QBlock(base, b, w);
    QBlock(base, b + TPR, u);
    const float d0 = QScale(base, K, b), d1 = QScale(base, K, b + TPR);
    QDot(w, d0, b, xb, nr, acc);
    QDot(u, d1, b + TPR, xb, nr, acc);
  }
  if (b < nb) {
    vec4 w[8];
    QBlock(base, b, w);
    QDot(w, QScale(base, K, b), b, xb, nr, acc);
  }
}
#elif defined(VEC)
// acc[r] += Σ over this invocation's share of k of W[row, k] x[r, k] (W: wload8's buffer).
void AccumVec(uint wrow, uint xb, uint nr, uint lane, inout float acc[RB]) {
  // Two groups of 8 weights in flight per invocation; x read as vec4.
  const uint nq = p.K / 8u;
  uint q = lane;
  for (; q + TPR < nq; q += 2u * TPR) {
    float v[8], u[8];
    wload8(wrow / 8u + q, v);
    wload8(wrow / 8u + q + TPR, u);
    for (uint r = 0; r < RB; ++r) {
      if (r < nr) {
        const uint xo = (xb + r * p.x_rs) / 4u;
        const vec4 a0 = XL(xo, 2u * q), a1 = XL(xo, 2u * q + 1u);
        const vec4 b0 = XL(xo, 2u * (q + TPR)), b1 = XL(xo, 2u * (q + TPR) + 1u);
        acc[r] += dot(vec4(v[0], v[1], v[2], v[3]), a0) + dot(vec4(v[4], v[5], v[6], v[7]), a1) +
                  dot(vec4(u[0], u[1], u[2], u[3]), b0) + dot(vec4(u[4], u[5], u[6], u[7]), b1);
      }
    }
  }
  if (q < nq) {
    float v[8];
    wload8(wrow / 8u + q, v);
    for (uint r = 0; r < RB; ++r) {
      if (r < nr) {
        const uint xo = (xb + r * p.x_rs) / 4u;
        acc[r] += dot(vec4(v[0], v[1], v[2], v[3]), XL(xo, 2u * q)) +
                  dot(vec4(v[4], v[5], v[6], v[7]), XL(xo, 2u * q + 1u));
      }
    }
  }
}
#endif

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint g = tid / TPR, lane = tid % TPR;
  const uint n = gl_WorkGroupID.x * ROWS + g;
  const uint h = gl_WorkGroupID.y;
  const uint r0 = gl_WorkGroupID.z * RB;
  const uint nr = min(RB, p.R - r0);
  float acc[RB];
  for (uint r = 0; r < RB; ++r) acc[r] = 0.0;
#ifdef DUAL
  float acc2[RB];
  for (uint r = 0; r < RB; ++r) acc2[r] = 0.0;
#endif
  if (n < p.N) {
    const uint wrow = (h * p.N + n) * p.K;
    const uint xb = r0 * p.x_rs + h * p.x_hs + p.x_off;
#if defined(DUAL)
    wsel = 0u;
    AccumVec(wrow, xb, nr, lane, acc);
    wsel = 1u;
    AccumVec(wrow, xb, nr, lane, acc2);
#elif defined(VEC)
    AccumVec(wrow, xb, nr, lane, acc);
#else
    for (uint k = lane; k < p.K; k += TPR) {
      const float wv = wload(wrow + k);
      for (uint r = 0; r < RB; ++r)
        if (r < nr) acc[r] += wv * x[xb + r * p.x_rs + k];
    }
#endif
  }
  // Folded RMSNorm: this invocation's share of Σ x² per row (the group covers all of K).
  float ss[RB];
  for (uint r = 0; r < RB; ++r) ss[r] = 0.0;
#ifdef VEC
  if (p.norm != 0u && n < p.N) {
    for (uint r = 0; r < RB; ++r) {
      if (r < nr) {
        const uint xo = (r0 * p.x_rs + r * p.x_rs) / 4u;
        for (uint k4 = lane; k4 < p.K / 4u; k4 += TPR) ss[r] += dot(x4[xo + k4], x4[xo + k4]);
      }
    }
  }
#endif
  for (uint r = 0; r < RB; ++r) {
    const float s = subgroupAdd(acc[r]);
    if (subgroupElect()) part[r][gl_SubgroupID] = s;
    const float q2 = subgroupAdd(ss[r]);
    if (subgroupElect()) part_ss[r][gl_SubgroupID] = q2;
#ifdef DUAL
    const float s2 = subgroupAdd(acc2[r]);
    if (subgroupElect()) part2[r][gl_SubgroupID] = s2;
#endif
  }
  barrier();
  if (lane == 0u && n < p.N) {
    const uint per = TPR / gl_SubgroupSize;  // subgroups per output (>= 1, host-checked)
    const uint first = g * per;
    const float b = p.has_bias != 0u ? bias[p.n0 + n] : 0.0;
    for (uint r = 0; r < nr; ++r) {
      float s = 0.0, sq = 0.0;
      for (uint i = 0; i < per; ++i) {
        s += part[r][first + i];
        sq += part_ss[r][first + i];
      }
      const float inv = p.norm != 0u ? 1.0 / sqrt(sq / float(p.K) + p.eps) : 1.0;
      s *= inv;
      const uint yi = (r0 + r) * p.y_rs + h * p.y_hs + p.y_off + p.n0 + n;
#ifdef DUAL
      float s2 = 0.0;
      for (uint i = 0; i < per; ++i) s2 += part2[r][first + i];
      s2 *= inv;
      y[yi] = s / (1.0 + exp(-s)) * s2;
#else
      y[yi] = s + b + (p.epi == 1u ? res[yi] : 0.0);
#endif
    }
  }
}
