#version 450
// Routed-expert FFN reading only the chosen experts' weights. Each projection's experts are one
// stack (weights.h): up to NB buffers are bound as an array and a table gives each
// expert matrix's (block, element offset): table[6e + 2m] = block, table[6e + 2m + 1] = offset
// for m = gate, up, down. The block index is uniform per workgroup (one expert per workgroup).
//   UP:   h[pair, i] = silu(gate_e[i]·x_r) * (up_e[i]·x_r)      pair = r*top_k + j, i < I
//   DOWN: y[r, d] = Σ_j w[r, j] * (down_e[d]·h[pair])           d < D
// Same reduction layout as matmul_gemv (ROWS outputs per workgroup, TPR invocations each).
// Block-quantized experts (W_Q*, wload.glsl's repacked rows): the table's offsets are in words
// and each invocation walks 8-element slices (QSlice) of the expert's row.
#include "common.glsl"
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 128;
layout(constant_id = 1) const uint ROWS = 4;
const uint TPR = WG / ROWS, NB = 8;  // ops/moe.cpp kMoeMaxBlocks
#ifdef VEC
layout(binding = 0) readonly buffer Wb { uvec4 wq[]; } wb[NB];
#define QUAD(i) wb[blk].wq[i]
#define WORD(i) wb[blk].wq[(i) >> 2][(i) & 3u]
#else
layout(binding = 0) readonly buffer Wb { uint w[]; } wb[NB];
#define WORD(i) wb[blk].w[i]
#endif
layout(binding = 1) readonly buffer X { float x[]; };
layout(binding = 2) readonly buffer Ids { int ids[]; };
layout(binding = 3) readonly buffer Wt { float wts[]; };
layout(binding = 4) readonly buffer Tb { uint table[]; };
layout(binding = 5) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint D, I, top_k; } p;
uint blk;
#if defined(UP)
#define WCOLS p.D
#else
#define WCOLS p.I
#endif
#include "wload.glsl"
shared float part[2][64];

// Σ_k W[row, k] v[vb + k] over this invocation's share of k (K = len, W at element offset wo;
// block types: at word offset wo).
#if defined(W_QUANT)
float Dot(uint wo, uint row, uint K, uint vb, uint lane) {
  float acc = 0.0;
  const uint base = wo + row * QRowWords(K);
  for (uint s = lane; s < K / 8u; s += TPR) {
    vec4 q0, q1, dm;
    uint k0, k1;
    QSlice(base, K, s, q0, q1, k0, k1, dm);
    const uint a = vb + k0, b = vb + k1;
    const vec4 x0 = vec4(x[a], x[a + 1u], x[a + 2u], x[a + 3u]);
    const vec4 x1 = vec4(x[b], x[b + 1u], x[b + 2u], x[b + 3u]);
    acc += dm.x * dot(q0, x0) + dm.z * dot(q1, x1);
#if defined(QHAS_MIN)
    acc += dm.y * (x0.x + x0.y + x0.z + x0.w) + dm.w * (x1.x + x1.y + x1.z + x1.w);
#endif
  }
  return acc;
}
#else
float Dot(uint wo, uint row, uint K, uint vb, uint lane) {
  float acc = 0.0;
  const uint wrow = wo + row * K;
#ifdef VEC
  for (uint q = lane; q < K / 8u; q += TPR) {
    float v[8];
    wload8(wrow / 8u + q, v);
    for (uint j = 0; j < 8u; ++j) acc += v[j] * x[vb + q * 8u + j];
  }
#else
  for (uint k = lane; k < K; k += TPR) acc += wload(wrow + k) * x[vb + k];
#endif
  return acc;
}
#endif

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint g = tid / TPR, lane = tid % TPR;
  const uint per = TPR / gl_SubgroupSize;
#if defined(UP)
  const uint pair = gl_WorkGroupID.y, r = pair / p.top_k;
  const uint e = uint(ids[pair]);
  const uint i = gl_WorkGroupID.x * ROWS + g;
  float a = 0.0, b = 0.0;
  if (i < p.I) {
    blk = table[6u * e + 0u];
    a = Dot(table[6u * e + 1u], i, p.D, r * p.D, lane);
    blk = table[6u * e + 2u];
    b = Dot(table[6u * e + 3u], i, p.D, r * p.D, lane);
  }
  a = subgroupAdd(a);
  b = subgroupAdd(b);
  if (subgroupElect()) {
    part[0][gl_SubgroupID] = a;
    part[1][gl_SubgroupID] = b;
  }
  barrier();
  if (lane == 0u && i < p.I) {
    float ga = 0.0, ub = 0.0;
    for (uint s = 0; s < per; ++s) {
      ga += part[0][g * per + s];
      ub += part[1][g * per + s];
    }
    y[pair * p.I + i] = ga / (1.0 + exp(-ga)) * ub;
  }
#elif defined(DOWN)
  const uint r = gl_WorkGroupID.y;
  const uint d = gl_WorkGroupID.x * ROWS + g;
  float total = 0.0;
  for (uint j = 0; j < p.top_k; ++j) {
    const uint pair = r * p.top_k + j;
    const uint e = uint(ids[pair]);
    float a = 0.0;
    if (d < p.D) {
      blk = table[6u * e + 4u];
      a = Dot(table[6u * e + 5u], d, p.I, pair * p.I, lane);
    }
    a = subgroupAdd(a);
    if (subgroupElect()) part[0][gl_SubgroupID] = a;
    barrier();
    if (lane == 0u) {
      float s = 0.0;
      for (uint k = 0; k < per; ++k) s += part[0][g * per + k];
      total += wts[pair] * s;
    }
    barrier();
  }
  if (lane == 0u && d < p.D) y[r * p.D + d] = total;
#else
#error "define UP or DOWN"
#endif
}
