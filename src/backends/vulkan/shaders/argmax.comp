#version 450
// Greedy sampling on the device: ids[r] = argmax_c x[r, c] (lowest index on ties), one
// workgroup per row, so only one token id per row comes back to the host.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer I { int ids[]; };
layout(push_constant) uniform P { uint C; } p;
shared float bv[256];
shared uint bi[256];
void main() {
  const uint r = FlatGroup(), tid = gl_LocalInvocationID.x;
  float best = -1.0 / 0.0;
  uint besti = 0xffffffffu;
  for (uint c = tid; c < p.C; c += 256u) {
    const float v = x[r * p.C + c];
    if (v > best || besti == 0xffffffffu) { best = v; besti = c; }
  }
  bv[tid] = best;
  bi[tid] = besti;
  barrier();
  for (uint s = 128u; s > 0u; s >>= 1) {
    if (tid < s) {
      const float ov = bv[tid + s];
      const uint oi = bi[tid + s];
      if (oi != 0xffffffffu && (bi[tid] == 0xffffffffu || ov > bv[tid] || (ov == bv[tid] && oi < bi[tid]))) {
        bv[tid] = ov;
        bi[tid] = oi;
      }
    }
    barrier();
  }
  if (tid == 0u) ids[r] = int(bi[0]);
}
