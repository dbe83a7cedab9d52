#version 450
// Activations to int8 (int16 in the "_i16" variant, for Q8_0 weights) per 32-element block, for
// the integer-dot GEMV (matmul_gemv.comp IDOT):
//   v = x[r, k], or with a folded RMSNorm (p.norm == 1) g[k] * (x[r, k] * inv),
//   inv = 1 / sqrt(mean_k(x[r, k]²) + eps);
//   per block b of row r (quant_x.glsl's QuantizeBlock32): XB uvec4 at (r * K / 32 + b) * XB,
//   and (d, d * Σ q) at vec2 index r * K / 32 + b.
// x: rows of K f32 with stride x_rs (K % 32 == 0, x_rs % 4 == 0). Workgroups (R, Y): Y split a
// row's blocks (1 with a folded norm, whose Σx² is the whole row's), each invocation one block at
// a time. A folded norm quantizes g ⊙ x (the same int8 levels as the normed values, the scale
// 1/inv larger), takes Σx² on the same pass, then scales its blocks' (d, d·Σq) by inv.
#include "common.glsl"
layout(local_size_x = 128) in;
layout(binding = 0) readonly buffer X { vec4 x4[]; };
layout(binding = 1) readonly buffer G { vec4 g4[]; };
#define QX_X4 1  // quant_x.glsl's QuantizeXBlock over x4, g4
#include "quant_x.glsl"
layout(binding = 2) writeonly buffer Q { uvec4 q4[]; };
layout(binding = 3) buffer DS { vec2 ds[]; };  // read back by a folded norm
layout(push_constant) uniform P { uint K, x_rs, norm; float eps; } p;

void main() {
  const uint r = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
  const uint xo = r * p.x_rs / 4u, nb = p.K / 32u;
  const uint b0 = gl_WorkGroupID.y * 128u + tid, step = gl_NumWorkGroups.y * 128u;
  float ss = 0.0;
  for (uint b = b0; b < nb; b += step) {
    const uint o = (r * nb + b) * XB;
    uvec4 q[XB];
    vec2 d;
    QuantizeXBlock(xo + 8u * b, 8u * b, p.norm != 0u, ss, q, d);
    for (uint j = 0; j < XB; ++j) q4[o + j] = q[j];
    ds[r * nb + b] = d;
  }
  if (p.norm != 0u) {  // uniform; one workgroup per row
    const float inv = 1.0 / sqrt(WgSum(ss) / float(p.K) + p.eps);
    for (uint b = b0; b < nb; b += step) ds[r * nb + b] *= inv;
  }
}
