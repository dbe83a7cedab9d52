#version 450
// RMSNorm, one workgroup per row: out = x * rsqrt(mean(x^2) + eps) * w.   x, out: [R, D]; w: [D]
#include "common.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer Wt { float w[]; };
layout(binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint D; float eps; } p;
void main() {
  const uint row = FlatGroup(), base = row * p.D;
  float ss = 0.0;
  for (uint i = gl_LocalInvocationID.x; i < p.D; i += 256u) ss += x[base + i] * x[base + i];
  ss = WgSum(ss);
  const float inv = 1.0 / sqrt(ss / float(p.D) + p.eps);
  for (uint i = gl_LocalInvocationID.x; i < p.D; i += 256u) o[base + i] = w[i] * (x[base + i] * inv);
}
