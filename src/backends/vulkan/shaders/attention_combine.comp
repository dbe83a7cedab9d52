#version 450
// Merges the split-key partials of attention.comp (SPLIT) for one (head, row) per workgroup:
//   part[((t*Hq + h)*S + s)*(dv + 2) + d] = Σ_{j in chunk s} exp(score_j - m_s) value_j[d], then m_s, l_s
//   out[t*o_rs + h*o_hs + d] = Σ_s exp(m_s - M) acc_s[d] / Σ_s exp(m_s - M) l_s,  M = max_s m_s
// Chunks without keys carry m_s = -inf and contribute nothing.
layout(local_size_x = 128) in;
layout(binding = 0) readonly buffer Part { float part[]; };
layout(binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint Hq, S, dv, o_rs, o_hs; } p;
void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint w = p.dv + 2u, base = (t * p.Hq + h) * p.S * w;
  float M = -1.0 / 0.0;
  for (uint s = 0; s < p.S; ++s) M = max(M, part[base + s * w + p.dv]);
  float L = 0.0;
  for (uint s = 0; s < p.S; ++s) {
    const float ms = part[base + s * w + p.dv];
    if (ms > -1.0 / 0.0) L += exp(ms - M) * part[base + s * w + p.dv + 1u];
  }
  for (uint d = tid; d < p.dv; d += 128u) {
    float a = 0.0;
    for (uint s = 0; s < p.S; ++s) {
      const float ms = part[base + s * w + p.dv];
      if (ms > -1.0 / 0.0) a += exp(ms - M) * part[base + s * w + d];
    }
    o[t * p.o_rs + h * p.o_hs + d] = a / L;
  }
}
