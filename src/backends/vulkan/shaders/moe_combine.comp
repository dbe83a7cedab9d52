#version 450
// The routed experts' weighted outputs of each token added in choice order (fixed, so a row's
// result does not depend on the batch): y[r, d] = Σ_j yp[(r * top_k + j) * D + d].
#include "common.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer YP { float yp[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint R, D, top_k; } p;
void main() {
  const uint i = FlatGroup() * 256u + gl_LocalInvocationID.x;
  if (i >= p.R * p.D) return;
  const uint r = i / p.D, d = i % p.D;
  float s = 0.0;
  for (uint j = 0u; j < p.top_k; ++j) s += yp[(r * p.top_k + j) * p.D + d];
  y[i] = s;
}
