#version 450
// MLA's decode output in one pass (ops/mla_attention.cpp RecordMergedOutput: steps of at most
// kGemvMaxRows rows whose keys mla_attention.comp split into S chunks, float Wuv): merges the
// chunks' partials of one (head, row) as attention_combine.comp does — the head's latent output
// o_lat[0..r) in shared memory — and multiplies it by OC rows of the head's Wuv:
//   part[((t*H + h)*S + s)*(r + 2) + k] = Σ_{j in chunk s} exp(score_j - m_s) latent_j[k], m_s, l_s
//   o_lat[k] = Σ_s exp(m_s - M) part_s[k] / Σ_s exp(m_s - M) l_s,   M = max_s m_s
//   out[t*o_rs + h*dv + d] = Σ_k Wuv[h*dv + d, k] o_lat[k],   d in [z*OC, z*OC + OC)
// gl_WorkGroupID: x = h, y = t, z = the chunk of OC outputs (each chunk merges the partials again:
// they were just written, so they come from L2). One barrier level less a layer than the merge
// and the per-head GEMV (matmul_gemv.comp) one after the other. Chunks without keys carry
// m_s = -inf and are not read beyond it (a writer may leave their sums unwritten).
// W_F16: Wuv as f16 (r % 8 == 0: 8 halves a uvec4), else f32 (r % 4 == 0: vec4).
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint OC = 32;  // outputs a workgroup (divides 128)
const uint TPR = 128u / OC;                  // invocations an output
#define MAX_S 64u
#define MAX_R 1024u
layout(binding = 0) readonly buffer Part { float part[]; };
#ifdef W_F16
layout(binding = 1) readonly buffer W { uvec4 w[]; };
#else
layout(binding = 1) readonly buffer W { vec4 w[]; };
#endif
layout(binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint H, r, dv, o_rs, S; } p;
shared float ms[MAX_S], ws[MAX_S];
shared float lat[MAX_R];
shared float sums[128];

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint S = p.S, rw = p.r + 2u, base = (t * p.H + h) * S * rw;
  if (tid < S) ms[tid] = part[base + tid * rw + p.r];
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
  for (uint s = 0u; s < U; ++s)
    if (ws[s] != 0.0) L += ws[s] * part[base + s * rw + p.r + 1u];
  // Each invocation merges dims tid + 128 i (i < NK): 8 chunks' loads for all of them issued
  // together, as many in flight as attention_combine.comp's one dim an invocation has per chunk.
  const uint NK = (p.r + 127u) / 128u;
  float a[MAX_R / 128u];
  for (uint i = 0u; i < MAX_R / 128u; ++i) a[i] = 0.0;
  for (uint s0 = 0u; s0 < U; s0 += 8u)
    for (uint b = 0u; b < 8u; ++b) {
      const uint s = s0 + b;
      if (s >= U || ws[s] == 0.0) continue;
      const float wt = ws[s];
      for (uint i = 0u; i < MAX_R / 128u; ++i) {
        const uint k = tid + 128u * i;
        if (i < NK && k < p.r) a[i] += wt * part[base + s * rw + k];
      }
    }
  for (uint i = 0u; i < NK; ++i) {
    const uint k = tid + 128u * i;
    if (k < p.r) lat[k] = a[i] / L;
  }
  barrier();
  // Output d of the chunk: TPR invocations, each over every TPR-th group of the row.
  const uint d = gl_WorkGroupID.z * OC + tid / TPR, lane = tid % TPR;
  float acc = 0.0;
  if (d < p.dv) {
#ifdef W_F16
    const uint row = (h * p.dv + d) * (p.r / 8u);
    for (uint j = lane; j < p.r / 8u; j += TPR) {
      const uvec4 q = w[row + j];
      const uint k = j * 8u;
      acc += dot(vec4(unpackHalf2x16(q.x), unpackHalf2x16(q.y)),
                 vec4(lat[k], lat[k + 1u], lat[k + 2u], lat[k + 3u])) +
             dot(vec4(unpackHalf2x16(q.z), unpackHalf2x16(q.w)),
                 vec4(lat[k + 4u], lat[k + 5u], lat[k + 6u], lat[k + 7u]));
    }
#else
    const uint row = (h * p.dv + d) * (p.r / 4u);
    for (uint j = lane; j < p.r / 4u; j += TPR) {
      const uint k = j * 4u;
      acc += dot(w[row + j], vec4(lat[k], lat[k + 1u], lat[k + 2u], lat[k + 3u]));
    }
#endif
  }
  sums[tid] = acc;
  barrier();
  if (lane == 0u && d < p.dv) {
    float s = 0.0;
    for (uint i = 0u; i < TPR; ++i) s += sums[tid + i];
    o[t * p.o_rs + h * p.dv + d] = s;
  }
}
