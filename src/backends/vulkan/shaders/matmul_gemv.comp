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
// Q8_0/Q4_0 weights (VEC): each group of TPR invocations computes QR adjacent outputs, so a
// workgroup covers ROWS * QR outputs (the host's group count says so).
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
// Outputs per invocation group: QR adjacent rows for quantized weights (they share each x
// block; matmul.cpp's kGemvQuantRows must match), 1 otherwise.
#if defined(VEC) && defined(W_QUANT)
const uint QR = 2u;
#else
const uint QR = 1u;
#endif
shared float part[QR][RB][64];
shared float part_ss[RB][64];
#ifdef DUAL
shared float part2[QR][RB][64];
#endif

#if defined(VEC) && defined(W_QUANT)
// Quantized rows (wload.glsl's repacked layout): each invocation walks whole 32-element blocks
// of QR adjacent weight rows at once, so every x block (8 vec4 per batch row) is read once for
// QR rows; the quants stay packed in registers (one uvec4 per row for Q4_0, two for Q8_0) and
// are expanded 4 at a time next to the x vec4 they multiply; each f16 scale is read once per
// block and applied to the block's sum.
vec4 Nib4(uint w, uint sh) {  // 4 nibbles (bits sh..sh+3 of each byte) of w, minus 8
  return vec4(float((w >> sh) & 15u), float((w >> (sh + 8u)) & 15u), float((w >> (sh + 16u)) & 15u),
              float((w >> (sh + 24u)) & 15u)) - 8.0;
}
vec4 Byte4(uint w) {  // 4 signed bytes of w
  return vec4(float(int(w << 24) >> 24), float(int(w << 16) >> 24), float(int(w << 8) >> 24),
              float(int(w) >> 24));
}
// Elements 4 j .. 4 j + 3 of a block whose quants are qa (Q4_0) or qa, qb (Q8_0).
vec4 QElems(uvec4 qa, uvec4 qb, uint j) {
#if defined(W_Q4_0)
  // Elements 0..15: low nibbles of bytes 0..15 (words x, y, z, w); 16..31: high nibbles.
  return Nib4(qa[j & 3u], (j >> 2) * 4u);
#else
  return Byte4(j < 4u ? qa[j] : qb[j - 4u]);
#endif
}
// acc[i][r] += Σ over this invocation's blocks of W[row0 + i, k] x[r, k], i < QR; rows are
// whole repacked rows of K elements; rows past `last` read `last` instead.
void AccumQuant(uint row0, uint last, uint xb, uint nr, uint lane, inout float acc[QR][RB]) {
  const uint K = p.K, nb = K / 32u, rw = QRowWords(K);  // words per row; a multiple of 4
  for (uint b = lane; b < nb; b += TPR) {
    uvec4 qa[QR], qb[QR];
    float d[QR];
    for (uint i = 0; i < QR; ++i) {
      const uint base = min(row0 + i, last) * rw;
#if defined(W_Q4_0)
      qa[i] = QUAD((base + b * 4u) / 4u);
      qb[i] = uvec4(0u);
#else
      qa[i] = QUAD((base + b * 8u) / 4u);
      qb[i] = QUAD((base + b * 8u) / 4u + 1u);
#endif
      d[i] = QScale(base, K, b);
    }
    for (uint r = 0; r < RB; ++r) {
      if (r < nr) {
        const uint xo = (xb + r * p.x_rs) / 4u, k4 = b * 8u;
        float s[QR];
        for (uint i = 0; i < QR; ++i) s[i] = 0.0;
        for (uint j = 0; j < 8u; ++j) {
          const vec4 xv = XL(xo, k4 + j);
          for (uint i = 0; i < QR; ++i) s[i] += dot(QElems(qa[i], qb[i], j), xv);
        }
        for (uint i = 0; i < QR; ++i) acc[i][r] += d[i] * s[i];
      }
    }
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
  const uint n = (gl_WorkGroupID.x * ROWS + g) * QR;  // this group's first output
  const uint h = gl_WorkGroupID.y;
  const uint r0 = gl_WorkGroupID.z * RB;
  const uint nr = min(RB, p.R - r0);  // uniform in the workgroup
  float acc[QR][RB];
  for (uint i = 0; i < QR; ++i)
    for (uint r = 0; r < RB; ++r) acc[i][r] = 0.0;
#ifdef DUAL
  float acc2[QR][RB];
  for (uint i = 0; i < QR; ++i)
    for (uint r = 0; r < RB; ++r) acc2[i][r] = 0.0;
#endif
  if (n < p.N) {
    const uint xb = r0 * p.x_rs + h * p.x_hs + p.x_off;
#if defined(VEC) && defined(W_QUANT)
    // Rows past N (the last group of the last workgroup) re-read row N - 1; not written.
    const uint row0 = h * p.N + n, last = h * p.N + p.N - 1u;
#if defined(DUAL)
    wsel = 0u;
    AccumQuant(row0, last, xb, nr, lane, acc);
    wsel = 1u;
    AccumQuant(row0, last, xb, nr, lane, acc2);
#else
    AccumQuant(row0, last, xb, nr, lane, acc);
#endif
#else
    const uint wrow = (h * p.N + n) * p.K;
#if defined(DUAL)
    wsel = 0u;
    AccumVec(wrow, xb, nr, lane, acc[0]);
    wsel = 1u;
    AccumVec(wrow, xb, nr, lane, acc2[0]);
#elif defined(VEC)
    AccumVec(wrow, xb, nr, lane, acc[0]);
#else
    for (uint k = lane; k < p.K; k += TPR) {
      const float wv = wload(wrow + k);
      for (uint r = 0; r < RB; ++r)
        if (r < nr) acc[0][r] += wv * x[xb + r * p.x_rs + k];
    }
#endif
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
    if (r < nr) {  // uniform: every invocation of the workgroup takes the same branch
      for (uint i = 0; i < QR; ++i) {
        const float s = subgroupAdd(acc[i][r]);
        if (subgroupElect()) part[i][r][gl_SubgroupID] = s;
#ifdef DUAL
        const float s2 = subgroupAdd(acc2[i][r]);
        if (subgroupElect()) part2[i][r][gl_SubgroupID] = s2;
#endif
      }
      if (p.norm != 0u) {
        const float q2 = subgroupAdd(ss[r]);
        if (subgroupElect()) part_ss[r][gl_SubgroupID] = q2;
      }
    }
  }
  barrier();
  if (lane == 0u && n < p.N) {
    const uint per = TPR / gl_SubgroupSize;  // subgroups per output (>= 1, host-checked)
    const uint first = g * per;
    for (uint r = 0; r < nr; ++r) {
      float sq = 0.0;
      if (p.norm != 0u)
        for (uint c = 0; c < per; ++c) sq += part_ss[r][first + c];
      const float inv = p.norm != 0u ? 1.0 / sqrt(sq / float(p.K) + p.eps) : 1.0;
      for (uint i = 0; i < QR; ++i) {
        const uint ni = n + i;
        if (ni >= p.N) break;
        float s = 0.0;
        for (uint c = 0; c < per; ++c) s += part[i][r][first + c];
        s *= inv;
        const uint yi = (r0 + r) * p.y_rs + h * p.y_hs + p.y_off + p.n0 + ni;
#ifdef DUAL
        float s2 = 0.0;
        for (uint c = 0; c < per; ++c) s2 += part2[i][r][first + c];
        s2 *= inv;
        y[yi] = s / (1.0 + exp(-s)) * s2;
#else
        const float b = p.has_bias != 0u ? bias[p.n0 + ni] : 0.0;
        y[yi] = s + b + (p.epi == 1u ? res[yi] : 0.0);
#endif
      }
    }
  }
}
