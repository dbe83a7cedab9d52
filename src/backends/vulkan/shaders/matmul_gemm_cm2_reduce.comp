#version 450
// The second half of a split-K product (matmul_gemm_cm2.comp's "_sk" variants, matmul_gemm_cm.comp
// with ks): y[r, n0 + n] = Σ_s
// part[s][r][n] (+ bias[n0 + n]) for the S partial products of the K slices. One invocation per
// output; workgroup x covers 256 columns, y the row.
layout(local_size_x = 256) in;

layout(binding = 0) readonly buffer Part { float part[]; };
layout(binding = 1) readonly buffer Bias { float bias[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint N, R, n0, y_rs, has_bias, S; } p;

void main() {
  const uint n = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y;
  if (n >= p.N || r >= p.R) return;
  const uint rn = p.R * p.N;
  uint i = r * p.N + n;
  float v = p.has_bias != 0u ? bias[p.n0 + n] : 0.0;
  for (uint s = 0u; s < p.S; ++s, i += rn) v += part[i];
  y[r * p.y_rs + p.n0 + n] = v;
}
