#version 450
// Tiled matrix product for prefill: y[r, n0 + n] = Σ_k x[r, k] W[n, k] (+ bias[n0 + n]).
//   x: [R, K] f32; W: [N, K] of the weight type (this chunk); y: row stride y_rs.
// BM x BN output tile per workgroup of 256 invocations (TM x TN each, strided by 16 so that
// neighbouring invocations read neighbouring shared words), K in steps of BK through shared
// memory; weights converted to f32 on the way in (block types: a group of 4 per invocation,
// wload.glsl QGroup4). Bounds-checked for any R, N, K.
// MOE: the grouped expert product of moe_gemm.glsl (one expert per gl_WorkGroupID.z).
#include "common.glsl"
layout(local_size_x = 256) in;
const uint TM = 8, TN = 8, BM = 16 * TM, BN = 16 * TN, BK = 8;
#ifdef MOE
layout(binding = 0) readonly buffer Wb { uint w[]; } wb[8];
layout(binding = 1) readonly buffer X { float x[]; };
#include "moe_gemm.glsl"
#define MOE_GEMM_FUNCS
#include "moe_gemm.glsl"
#define WORD(i) wb[blk].w[i]
#define XROW(row, gm) MoeXRow(row)
#define XRS p.x_rs
#define ROWS moe_count
#define WBASE_EL wbase   // dense types: elements
#define WBASE_Q wbase    // block types: words
#else
layout(binding = 0) readonly buffer W { uint w[]; };
layout(binding = 1) readonly buffer X { float x[]; };
layout(binding = 2) readonly buffer Bias { float bias[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint K, N, R, n0, y_rs, has_bias; } p;
#define WORD(i) w[i]
#define XROW(row, gm) (gm)
#define XRS p.K
#define ROWS p.R
#define WBASE_EL 0u
#define WBASE_Q 0u
#endif
#define WCOLS p.K
#include "wload.glsl"
const uint LA = BM * BK / 256, LB = BN * BK / 256;  // loads per invocation
shared float As[BK][BM + 1];
shared float Bs[BK][BN + 1];
void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint tx = tid % 16u, ty = tid / 16u;
  const uint m0 = gl_WorkGroupID.y * BM, nb = gl_WorkGroupID.x * BN;
#ifdef MOE
  if (!MoeBegin(m0)) return;
#endif
  float acc[TM][TN];
  for (uint i = 0; i < TM; ++i)
    for (uint j = 0; j < TN; ++j) acc[i][j] = 0.0;
  for (uint k0 = 0; k0 < p.K; k0 += BK) {
    for (uint l = 0; l < LA; ++l) {
      const uint e = tid + 256u * l;
      const uint row = e / BK, kk = e % BK;   // row of the tile, k inside the step
      const uint gk = k0 + kk, gm = m0 + row;
      As[kk][row] = (gm < ROWS && gk < p.K) ? x[XROW(row, gm) * XRS + gk] : 0.0;
    }
#if defined(W_QUANT)
    // Block types: one group of 4 elements per invocation (BN * BK / 4 == 256), dequantized
    // together (K % 32 == 0: the step never crosses the row end).
    {
      const uint row = tid / 2u, kk = 4u * (tid % 2u), gn = nb + row;
      const vec4 v = gn < p.N ? QGroup4(WBASE_Q + gn * QRowWords(p.K), p.K, k0 + kk) : vec4(0.0);
      for (uint j = 0; j < 4u; ++j) Bs[kk + j][row] = v[j];
    }
#else
    for (uint l = 0; l < LB; ++l) {
      const uint e = tid + 256u * l;
      const uint row = e / BK, kk = e % BK;
      const uint gk = k0 + kk, gn = nb + row;
      Bs[kk][row] = (gn < p.N && gk < p.K) ? wload(WBASE_EL + gn * p.K + gk) : 0.0;
    }
#endif
    barrier();
    for (uint kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
      for (uint i = 0; i < TM; ++i) a[i] = As[kk][ty + 16u * i];
      for (uint j = 0; j < TN; ++j) b[j] = Bs[kk][tx + 16u * j];
      for (uint i = 0; i < TM; ++i)
        for (uint j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
    }
    barrier();
  }
  for (uint i = 0; i < TM; ++i) {
    const uint row = ty + 16u * i, gm = m0 + row;
    if (gm >= ROWS) continue;
#ifdef MOE
    const uint yr = MoeYRow(row);
    const float sc = MoeScale(row);
#endif
    for (uint j = 0; j < TN; ++j) {
      const uint gn = nb + tx + 16u * j;
      if (gn >= p.N) continue;
#ifdef MOE
      y[yr * p.y_rs + gn] = acc[i][j] * sc;
#else
      y[gm * p.y_rs + p.n0 + gn] = acc[i][j] + (p.has_bias != 0u ? bias[p.n0 + gn] : 0.0);
#endif
    }
  }
}
