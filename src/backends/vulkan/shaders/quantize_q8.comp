#version 450
// Activations to int8 per 32-element block, for the integer-dot GEMV (matmul_gemv.comp IDOT):
//   v = x[r, k], or with a folded RMSNorm (p.norm == 1) g[k] * (x[r, k] * inv),
//   inv = 1 / sqrt(mean_k(x[r, k]²) + eps) (rms_norm.comp's order);
//   per block b of row r: d = max|v| / 127, q = roundEven(v / d) in [-127, 127] (all 0 when
//   d == 0), stored as 8 words of 4 int8 (element 4j + i in byte i of word j) at word
//   (r * K + 32 b) / 4, and (d, d * Σ q) at vec2 index r * K / 32 + b.
// x: rows of K f32 with stride x_rs (K % 32 == 0, x_rs % 4 == 0). One workgroup per row (R
// workgroups), each invocation one block at a time.
#include "common.glsl"
layout(local_size_x = 128) in;
layout(binding = 0) readonly buffer X { vec4 x4[]; };
layout(binding = 1) readonly buffer G { vec4 g4[]; };
layout(binding = 2) writeonly buffer Q { uvec4 q4[]; };
layout(binding = 3) writeonly buffer DS { vec2 ds[]; };
layout(push_constant) uniform P { uint K, x_rs, norm; float eps; } p;

uint Pack4(ivec4 q) {
  const uvec4 b = uvec4(q) & 0xffu;
  return b.x | (b.y << 8) | (b.z << 16) | (b.w << 24);
}

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
    float amax = 0.0;
    for (uint i = 0; i < 8u; ++i) {
      v[i] = x4[xo + 8u * b + i];
      if (p.norm != 0u) v[i] = g4[8u * b + i] * (v[i] * inv);
      const vec4 a = abs(v[i]);
      amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
    }
    const float d = amax / 127.0, id = d != 0.0 ? 1.0 / d : 0.0;
    uint w[8];
    int sum = 0;
    for (uint i = 0; i < 8u; ++i) {
      const ivec4 q = clamp(ivec4(roundEven(v[i] * id)), ivec4(-127), ivec4(127));
      sum += q.x + q.y + q.z + q.w;
      w[i] = Pack4(q);
    }
    const uint o = (r * p.K) / 16u + 2u * b;
    q4[o] = uvec4(w[0], w[1], w[2], w[3]);
    q4[o + 1u] = uvec4(w[4], w[5], w[6], w[7]);
    ds[r * nb + b] = vec2(d, d * float(sum));
  }
}
