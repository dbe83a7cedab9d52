#version 450
// The routed experts' weighted outputs of each token added in choice order (fixed, so a row's
// result does not depend on the batch): y[r, d] = Σ_j yp[(r * top_k + j) * D + d], over the
// choices of nonzero weight (moe_compact.comp leaves the others out: their rows are not written).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer YP { float yp[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };
layout(binding = 2) readonly buffer Wt { float wts[]; };
layout(push_constant) uniform P { uint R, D, top_k; } p;
void main() {
  const uint i = FlatGroup() * 256u + gl_LocalInvocationID.x;
  if (i >= p.R * p.D) return;
  const uint r = i / p.D, d = i % p.D;
  float s = 0.0;
  for (uint j = 0u; j < p.top_k; ++j)
    if (wts[r * p.top_k + j] != 0.0) s += yp[(r * p.top_k + j) * p.D + d];
  y[i] = s;
}
