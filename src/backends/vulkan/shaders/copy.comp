#version 450
// Strided copy of W columns per (row, head): out[r*os + h*ohs + ooff + c] =
// in[r*is + h*ihs + ioff + c]. Serves kSlice (H = 1) and MLA's q_pe gathering.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer I { float x[]; };
layout(binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint R, H, W, is, ihs, ioff, os, ohs, ooff; } p;
void main() {
  const uint idx = FlatGroup() * 256u + gl_LocalInvocationID.x;
  if (idx >= p.R * p.H * p.W) return;
  const uint c = idx % p.W, h = (idx / p.W) % p.H, r = idx / (p.W * p.H);
  o[r * p.os + h * p.ohs + p.ooff + c] = x[r * p.is + h * p.ihs + p.ioff + c];
}
