#version 450
// Copy bandwidth probe (`edgeseek devices --bandwidth`): dst = src as uvec4, grid-stride, so the
// figure is what a compute kernel streaming 16-byte loads and stores reaches.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer S { uvec4 src[]; };
layout(binding = 1) writeonly buffer D { uvec4 dst[]; };
layout(push_constant) uniform P { uint n; } p;  // uvec4 elements
void main() {
  const uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_WorkGroupID.x * 256u + gl_LocalInvocationID.x; i < p.n; i += stride) dst[i] = src[i];
}
