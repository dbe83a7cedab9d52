#version 450
// MLA's cache rows of a batch in one dispatch (the kv_a chain the builder folds: slice, RMSNorm,
// slice, rope, two stores): for each row t of kva [T, r + dr],
//   part 0 <- rms_norm(kva[t, 0:r]) (weight w, eps), as rms_norm.comp computes it;
//   part 1 <- rope(kva[t, r:r+dr]) (one head of dr dims, the pairs of rope.glsl from dim 0), as
//             kv_store.comp ROPE computes it;
// at the row's (slot, position) through the block tables (kv_addr.glsl). KV_F16 packs two halves
// a word (r and dr even). One workgroup per row.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer B { int bt[]; };
layout(binding = 2) readonly buffer Wt { float w[]; };
layout(binding = 3) writeonly buffer C0 { uint c0[]; };
layout(binding = 4) writeonly buffer C1 { uint c1[]; };
#include "kv_addr.glsl"
#include "rope.glsl"
layout(push_constant) uniform P { uint T, r, dr, slot_off, pos_off, half_, neox, cs_off; float eps; } p;

float Normed(uint base, uint j, float inv) { return w[j] * (x[base + j] * inv); }
float Roped(uint t, uint base, uint d) {  // dim d of the row's rope part, rotated
  uint partner, i;
  bool first;
  if (!RopePair(d, 0u, p.half_, p.neox != 0u, partner, i, first)) return x[base + d];
  const float cs = intBitsToFloat(bt[p.cs_off + t * p.half_ + i]);
  const float sn = intBitsToFloat(bt[p.cs_off + p.T * p.half_ + t * p.half_ + i]);
  return RopeRotate(x[base + d], x[base + partner], cs, sn, first);
}

void main() {
  const uint t = FlatGroup(), tid = gl_LocalInvocationID.x;
  const uint base = t * (p.r + p.dr);
  float ss = 0.0;
  for (uint i = tid; i < p.r; i += 256u) ss += x[base + i] * x[base + i];
  ss = WgSum(ss);
  const float inv = 1.0 / sqrt(ss / float(p.r) + p.eps);
  const uint row = KvRow(uint(bt[p.slot_off + t]), uint(bt[p.pos_off + t]));
#if defined(KV_F16)
  for (uint j = tid; j < p.r / 2u; j += 256u)
    c0[row * (p.r / 2u) + j] = packHalf2x16(vec2(Normed(base, 2u * j, inv), Normed(base, 2u * j + 1u, inv)));
  for (uint j = tid; j < p.dr / 2u; j += 256u)
    c1[row * (p.dr / 2u) + j] = packHalf2x16(vec2(Roped(t, base + p.r, 2u * j), Roped(t, base + p.r, 2u * j + 1u)));
#else
  for (uint j = tid; j < p.r; j += 256u) c0[row * p.r + j] = floatBitsToUint(Normed(base, j, inv));
  for (uint j = tid; j < p.dr; j += 256u) c1[row * p.dr + j] = floatBitsToUint(Roped(t, base + p.r, j));
#endif
}
