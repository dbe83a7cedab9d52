#version 450
// Rotary embedding. x, out: [R, H*hd]; dims [off, off + 2*half) of each head rotate with the
// per-row cos/sin tables the host computed from the batch positions (attention_factor folded):
// cs[r*half + i] = cos, cs[R*half + r*half + i] = sin. NEOX pairs (i, i + half); otherwise
// DeepSeek's interleaved pairs (2i, 2i + 1). Other dims are copied.
#include "common.glsl"
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
  if (d < p.off || d >= p.off + 2u * p.half_) {
    o[idx] = x[idx];
    return;
  }
  const uint e = d - p.off;
  uint i, ia, ib;
  if (p.neox != 0u) {
    i = e % p.half_;
    ia = hb + p.off + i;
    ib = ia + p.half_;
  } else {
    i = e / 2u;
    ia = hb + p.off + 2u * i;
    ib = ia + 1u;
  }
  const float c = cs[p.cs_off + r * p.half_ + i];
  const float s = cs[p.cs_off + p.R * p.half_ + r * p.half_ + i];
  const float x0 = x[ia], x1 = x[ib];
  o[idx] = (idx == ia) ? x0 * c - x1 * s : x1 * c + x0 * s;
}
