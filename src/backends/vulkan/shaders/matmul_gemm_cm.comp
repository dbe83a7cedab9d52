#version 450
// Prefill matrix product on tensor cores (GL_NV_cooperative_matrix):
//   y[r, n0 + n] = Σ_k x[r, k] W[n, k] (+ bias[n0 + n])
//   x: [R, K] f32 (converted to f16 on load); W: [N, K] of the weight type (this chunk; f16 as
//   is, bf16 and f32 converted to f16 on load; Q8_0/Q4_0 in wload.glsl's repacked rows,
//   dequantized to f16 on load: one 32-element block per row per K step, K % 32 == 0); y: f32,
//   row stride y_rs. K % 8 == 0 (host-checked).
// Workgroup of 256 invocations = 8 subgroups of 32 (host-checked subgroup size); output tile of
// BM x BN = (128 or 64, define BM) x 128, subgroups laid out 2 (rows) x 4 (columns), each owning
// BM/2 x 32 of the tile as (BM/2 / CM) x (32 / CN) f32 accumulators of CM x CN (CM = 16, CN = 16
// or 8 by the device's cooperative-matrix shapes, CK = 16). BM = 64 doubles the workgroups of
// prefill-sized products (512 rows x 3584 columns is only 112 tiles of 128 x 128). K goes in steps of BK = 32 through f16 tiles in
// shared memory; the next step's global loads are held in registers while the current step
// multiplies. Results go through a small per-subgroup f32 staging tile so that partial tiles at
// the edges of R and N (any size) and the bias are handled per element.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer W { uvec4 wq[]; };
layout(binding = 1) readonly buffer X { vec4 x4[]; };
layout(binding = 2) readonly buffer Bias { float bias[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint K, N, R, n0, y_rs, has_bias; } p;

#ifndef CN
#define CN 16
#endif
const uint CM = 16, CK = 16;
#ifndef BM
#define BM 128
#endif
const uint BN = 128, BK = 32;
const uint LDS = BK + 8;          // f16 per shared row: 80 bytes, a multiple of 16
const uint WM = BM / 2, WN = 32;  // per subgroup
const uint FM = WM / CM, FN = WN / CN;
// Weight elements per uvec4 and uvec4 loads per invocation per K step.
#if defined(W_F32)
const uint EPQ = 4;
#elif defined(W_F16) || defined(W_BF16)
const uint EPQ = 8;
#elif defined(W_Q8_0)
const uint EPQ = 16;
#elif defined(W_Q4_0)
const uint EPQ = 32;
#else
#error "define W_F32, W_F16, W_BF16, W_Q8_0 or W_Q4_0"
#endif
#if defined(W_Q8_0) || defined(W_Q4_0)
// Repacked quantized rows (wload.glsl): QRowWords, QScale and kQWordsPerBlock.
#define WORD(i) wq[(i) >> 2][(i) & 3u]
#define WCOLS p.K
#include "wload.glsl"
#endif
const uint QPR = BK / EPQ;                  // uvec4 per tile row of W
const uint LB = (BN * QPR + 255u) / 256u;   // per invocation (Q4_0: half of them load one)
const uint LA = BM * (BK / 4) / 256;        // vec4 of x per invocation

shared float16_t As[BM * LDS];
shared float16_t Bs[BN * LDS];
shared float stage[8][CM * CN];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint wm = sg / 4u, wn = sg % 4u;       // subgroup position in the 2 x 4 layout
  const uint m0 = gl_WorkGroupID.y * BM, nb = gl_WorkGroupID.x * BN;
  const uint K4 = p.K / 4u;

  fcoopmatNV<32, gl_ScopeSubgroup, CM, CN> acc[FM][FN];
  for (uint i = 0; i < FM; ++i)
    for (uint j = 0; j < FN; ++j) acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, CM, CN>(0.0);

  vec4 ra[LA];
  uvec4 rb[LB];
  // Global -> registers for the K step starting at k0 (zeros outside R, N, K).
  #define LOAD_TILES(k0)                                                              \
    for (uint l = 0; l < LA; ++l) {                                                   \
      const uint e = tid + 256u * l, row = e / (BK / 4u), c = e % (BK / 4u);          \
      const uint gm = m0 + row, gk4 = (k0) / 4u + c;                                  \
      ra[l] = (gm < p.R && gk4 < K4) ? x4[gm * K4 + gk4] : vec4(0.0);                \
    }                                                                                 \
    LOAD_W(k0)
#if defined(W_QUANT)
  // One block (k0 / 32) of each tile row: its quants and its scale (0 outside N; K % 32 == 0).
  float rd[LB];
  #define LOAD_W(k0)                                                                  \
    for (uint l = 0; l < LB; ++l) {                                                   \
      const uint e = tid + 256u * l, row = e / QPR, c = e % QPR, gn = nb + row;       \
      const uint base = gn * QRowWords(p.K), b = (k0) / 32u;                          \
      const bool ok = row < BN && gn < p.N;                                           \
      rb[l] = ok ? wq[(base + b * kQWordsPerBlock) / 4u + c] : uvec4(0u);             \
      rd[l] = ok ? QScale(base, p.K, b) : 0.0;                                        \
    }
#else
  #define LOAD_W(k0)                                                                  \
    for (uint l = 0; l < LB; ++l) {                                                   \
      const uint e = tid + 256u * l, row = e / QPR, c = e % QPR;                      \
      const uint gn = nb + row, gk = (k0) + c * EPQ;                                  \
      rb[l] = (gn < p.N && gk < p.K) ? wq[(gn * p.K + gk) / EPQ] : uvec4(0u);        \
    }
#endif

  LOAD_TILES(0u)
  for (uint k0 = 0; k0 < p.K; k0 += BK) {
    // Registers -> shared (f16).
    for (uint l = 0; l < LA; ++l) {
      const uint e = tid + 256u * l, row = e / (BK / 4u), c = e % (BK / 4u);
      const uint o = row * LDS + c * 4u;
      As[o] = float16_t(ra[l].x); As[o + 1u] = float16_t(ra[l].y);
      As[o + 2u] = float16_t(ra[l].z); As[o + 3u] = float16_t(ra[l].w);
    }
    for (uint l = 0; l < LB; ++l) {
      const uint e = tid + 256u * l, row = e / QPR, c = e % QPR;
      const uint o = row * LDS + c * EPQ;
      const uvec4 q = rb[l];
#if defined(W_Q4_0)
      // Element t < 16: low nibble of byte t; t + 16: its high nibble (x = d * (nibble - 8)).
      if (row < BN) {
        const float d = rd[l];
        for (uint t = 0; t < 16u; ++t) {
          const uint byte = (q[t >> 2] >> (8u * (t & 3u))) & 0xffu;
          Bs[o + t] = float16_t(d * (float(byte & 15u) - 8.0));
          Bs[o + t + 16u] = float16_t(d * (float(byte >> 4) - 8.0));
        }
      }
#elif defined(W_Q8_0)
      // Elements 16 c + t: signed byte t of q (x = d * q).
      const float d = rd[l];
      for (uint t = 0; t < 16u; ++t)
        Bs[o + t] = float16_t(d * float(int(q[t >> 2] << (24u - 8u * (t & 3u))) >> 24));
#elif defined(W_F32)
      Bs[o] = float16_t(uintBitsToFloat(q.x)); Bs[o + 1u] = float16_t(uintBitsToFloat(q.y));
      Bs[o + 2u] = float16_t(uintBitsToFloat(q.z)); Bs[o + 3u] = float16_t(uintBitsToFloat(q.w));
#elif defined(W_F16)
      for (uint j = 0; j < 4u; ++j) {
        const f16vec2 h = unpackFloat2x16(q[j]);
        Bs[o + 2u * j] = h.x;
        Bs[o + 2u * j + 1u] = h.y;
      }
#else
      for (uint j = 0; j < 4u; ++j) {
        Bs[o + 2u * j] = float16_t(uintBitsToFloat(q[j] << 16));
        Bs[o + 2u * j + 1u] = float16_t(uintBitsToFloat(q[j] & 0xffff0000u));
      }
#endif
    }
    barrier();
    if (k0 + BK < p.K) { LOAD_TILES(k0 + BK) }
    for (uint kk = 0; kk < BK; kk += CK) {
      fcoopmatNV<16, gl_ScopeSubgroup, CM, CK> a[FM];
      fcoopmatNV<16, gl_ScopeSubgroup, CK, CN> b[FN];
      for (uint i = 0; i < FM; ++i)
        coopMatLoadNV(a[i], As, (wm * WM + i * CM) * LDS + kk, LDS, false);
      // B[k][n] = W[n][k]: W rows are the columns of B (column-major with stride LDS).
      for (uint j = 0; j < FN; ++j)
        coopMatLoadNV(b[j], Bs, (wn * WN + j * CN) * LDS + kk, LDS, true);
      for (uint i = 0; i < FM; ++i)
        for (uint j = 0; j < FN; ++j) acc[i][j] = coopMatMulAddNV(a[i], b[j], acc[i][j]);
    }
    barrier();
  }

  for (uint i = 0; i < FM; ++i) {
    for (uint j = 0; j < FN; ++j) {
      coopMatStoreNV(acc[i][j], stage[sg], 0, CN, false);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      const uint rb0 = m0 + wm * WM + i * CM, cb0 = nb + wn * WN + j * CN;
      for (uint e = lane; e < CM * CN; e += gl_SubgroupSize) {
        const uint gm = rb0 + e / CN, gn = cb0 + e % CN;
        if (gm < p.R && gn < p.N)
          y[gm * p.y_rs + p.n0 + gn] = stage[sg][e] + (p.has_bias != 0u ? bias[p.n0 + gn] : 0.0);
      }
      subgroupBarrier();
    }
  }
}
