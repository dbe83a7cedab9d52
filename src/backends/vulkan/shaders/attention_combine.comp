#version 450
// Merges the split-key partials of attention.comp (SPLIT), attention_decode.comp and
// mla_attention.comp for 128 output dims of one (head, row) per workgroup (gl_WorkGroupID.z: the
// dims' chunk, so MLA's 512-wide latent heads take four):
//   part[((t*Hq + h)*S + s)*(dv + 2) + d] = Σ_{j in chunk s} exp(score_j - m_s) value_j[d], then m_s, l_s
//   out[t*o_rs + h*o_hs + d] = Σ_s exp(m_s - M) acc_s[d] / Σ_s exp(m_s - M) l_s,  M = max_s m_s
// Chunks without keys carry m_s = -inf and contribute nothing (their sums are not read: a writer
// may leave them unwritten). Chunks with keys are a prefix of the S (the writers split a row's
// keys in order); only that prefix is read, 8 chunks' loads issued together. ROW_LIST: the rows
// are the decode rows of a mixed step, listed in the batch buffer (binding 2) at list_off.
// QUANT (the output projection takes the integer-dot GEMV, vulkan_backend.cpp): the head's
// outputs are also quantized per 32-block as quantize_q8.comp would quantize the row (quant_x.glsl;
// X_I16: int16 levels for Q8_0 weights): block b of row t at xq[(t * nb + b) * XB ..], its
// (d, d·Σq) at xds[t * nb + b], nb = o_rs / 32 (dv % 32 == 0 and o_hs % 32 == 0: no block
// straddles two heads).
// S, the chunk count, is a push constant (at most MAX_S: kMaxCombineSplits in ops.h): as a
// specialization constant it made a pipeline for every count, and the count follows the step's
// rows, so serving built pipelines mid-load.
layout(local_size_x = 128) in;
#define MAX_S 64u
layout(binding = 0) readonly buffer Part { float part[]; };
layout(binding = 1) writeonly buffer O { float o[]; };
#ifdef QUANT
#include "quant_x.glsl"
layout(binding = 2) writeonly buffer XQ { uvec4 xq[]; };
layout(binding = 3) writeonly buffer XDS { vec2 xds[]; };
shared vec4 outs[32];  // this workgroup's 128 outputs
#endif
#ifdef ROW_LIST
layout(binding = 2) readonly buffer B { int bt[]; };
#endif
layout(push_constant) uniform P { uint Hq, dv, o_rs, o_hs, list_off, S; } p;
shared float ms[MAX_S], ls[MAX_S], ws[MAX_S];
void main() {
  const uint S = p.S;
  const uint h = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
#ifdef ROW_LIST
  // Mixed steps: the decode rows listed at bt[list_off] (their count first).
  if (gl_WorkGroupID.y >= uint(bt[p.list_off])) return;
  const uint t = uint(bt[p.list_off + 1u + gl_WorkGroupID.y]);
#else
  const uint t = gl_WorkGroupID.y;
#endif
  const uint d0 = gl_WorkGroupID.z * 128u, d = d0 + tid;
  const uint w = p.dv + 2u, base = (t * p.Hq + h) * S * w;
  if (tid < S) {
    ms[tid] = part[base + tid * w + p.dv];
    ls[tid] = part[base + tid * w + p.dv + 1u];
  }
  barrier();
  float M = -1.0 / 0.0;
  uint U = 0u;  // chunks with keys: [0, U)
  for (uint s = 0u; s < S; ++s) {
    M = max(M, ms[s]);
    if (ms[s] > -1.0 / 0.0) U = s + 1u;
  }
  if (tid < S) ws[tid] = ms[tid] > -1.0 / 0.0 ? exp(ms[tid] - M) : 0.0;
  barrier();
  float L = 0.0;
  for (uint s = 0u; s < S; ++s)
    if (ws[s] != 0.0) L += ws[s] * ls[s];
  if (d < p.dv) {
    float a = 0.0;
    for (uint s0 = 0u; s0 < U; s0 += 8u) {
      float v[8];
      for (uint b = 0u; b < 8u; ++b) v[b] = s0 + b < U ? part[base + (s0 + b) * w + d] : 0.0;
      for (uint b = 0u; b < 8u; ++b)
        if (s0 + b < U) a += ws[s0 + b] != 0.0 ? ws[s0 + b] * v[b] : 0.0;
    }
    o[t * p.o_rs + h * p.o_hs + d] = a / L;
#ifdef QUANT
    outs[tid / 4u][tid % 4u] = a / L;
#endif
  }
#ifdef QUANT
  barrier();
  const uint nb = p.o_rs / 32u;
  if (tid < 4u && d0 + 32u * tid < p.dv) {  // the chunk's 32-blocks
    const uint b = d0 / 32u + tid;
    vec4 v[8];
    for (uint i = 0u; i < 8u; ++i) v[i] = outs[8u * tid + i];
    uvec4 q[XB];
    vec2 ds;
    QuantizeBlock32(v, q, ds);
    const uint blk = t * nb + (h * p.o_hs) / 32u + b;
    for (uint j = 0u; j < XB; ++j) xq[blk * XB + j] = q[j];
    xds[blk] = ds;
  }
#endif
}
