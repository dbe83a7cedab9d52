#version 450
// f32 -> f16 (round to nearest even) of n elements, n % 4 == 0: the f16 copy of a prefill GEMM's
// activations for matmul_gemm_cm2.comp (X_F16); the n4 - n4_in groups of 4 after the input's are
// zeros (the padding rows of a tile).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer I { vec4 x4[]; };
layout(binding = 1) writeonly buffer O { uvec2 o2[]; };
layout(push_constant) uniform P { uint n4, n4_in; } p;
void main() {
  const uint i = FlatGroup() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n4) return;
  const vec4 v = i < p.n4_in ? x4[i] : vec4(0.0);
  o2[i] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
}
