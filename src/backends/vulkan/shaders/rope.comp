#version 450
// Rotary embedding. x, out: [R, H*hd]; dims [off, off + 2*half) of each head rotate with the
// per-row cos/sin tables the host computed from the batch positions (attention_factor folded):
// cs[r*half + i] = cos, cs[R*half + r*half + i] = sin; pairs as rope.glsl. Other dims are copied.
#include "common.glsl"
#include "rope.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer B { float cs[]; };
layout(binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint R, H, hd, off, half_, neox, cs_off; } p;
void main() {
  const uint idx = FlatGroup() * 256u + gl_LocalInvocationID.x;
  if (idx >= p.R * p.H * p.hd) return;
  const uint d = idx % p.hd, r = idx / (p.H * p.hd);
  const uint hb = idx - d;  // start of this head
  uint partner, i;
  bool first;
  if (!RopePair(d, p.off, p.half_, p.neox != 0u, partner, i, first)) {
    o[idx] = x[idx];
    return;
  }
  const float c = cs[p.cs_off + r * p.half_ + i];
  const float s = cs[p.cs_off + p.R * p.half_ + r * p.half_ + i];
  o[idx] = RopeRotate(x[idx], x[hb + partner], c, s, first);
}
