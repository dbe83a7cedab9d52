#version 450
// Activations to int8 per 32-element block, for the integer-dot GEMV (matmul_gemv.comp IDOT):
//   v = x[r, k], or with a folded RMSNorm (p.norm == 1) g[k] * (x[r, k] * inv),
//   inv = 1 / sqrt(mean_k(x[r, k]²) + eps) (rms_norm.comp's order);
//   per block b of row r (quant_x.glsl's QuantizeBlock32): 8 words of 4 int8 at word
//   (r * K + 32 b) / 4, and (d, d * Σ q) at vec2 index r * K / 32 + b.
// x: rows of K f32 with stride x_rs (K % 32 == 0, x_rs % 4 == 0). One workgroup per row (R
// workgroups), each invocation one block at a time.
#include "common.glsl"
#include "quant_x.glsl"
layout(local_size_x = 128) in;
layout(binding = 0) readonly buffer X { vec4 x4[]; };
layout(binding = 1) readonly buffer G { vec4 g4[]; };
layout(binding = 2) writeonly buffer Q { uvec4 q4[]; };
layout(binding = 3) writeonly buffer DS { vec2 ds[]; };
layout(push_constant) uniform P { uint K, x_rs, norm; float eps; } p;

void main() {
  const uint r = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
  const uint xo = r * p.x_rs / 4u, nb = p.K / 32u;
  float inv = 1.0;
  if (p.norm != 0u) {
    float ss = 0.0;
    for (uint k4 = tid; k4 < p.K / 4u; k4 += 128u) ss += dot(x4[xo + k4], x4[xo + k4]);
    ss = WgSum(ss);
    inv = 1.0 / sqrt(ss / float(p.K) + p.eps);
  }
  for (uint b = tid; b < nb; b += 128u) {
    vec4 v[8];
    for (uint i = 0; i < 8u; ++i) {
      v[i] = x4[xo + 8u * b + i];
      if (p.norm != 0u) v[i] = g4[8u * b + i] * (v[i] * inv);
    }
    const uint o = (r * p.K) / 16u + 2u * b;
    vec2 d;
    QuantizeBlock32(v, q4[o], q4[o + 1u], d);
    ds[r * nb + b] = d;
  }
}
