#version 450
// Writes rows of x [T, W] into a KV cache part at each row's (slot, position), addressed
// through the block tables (kv_addr.glsl). KV_F16 packs two halves per word (W even); KV_F32 stores floats.
// ROPE: x is a rope's input [T, heads * hd]; each element is rotated as rope.comp does (dims
// [off, off + 2 half) of each head, pairs as rope.glsl; cos/sin from the batch buffer's tables
// at cs_off) before it is stored.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer B { int bt[]; };
layout(binding = 2) writeonly buffer C { uint c[]; };
#include "kv_addr.glsl"
layout(push_constant) uniform P { uint T, W, capacity, slot_off, pos_off, hd, off, half_, neox, cs_off; } p;
#ifdef ROPE
#include "rope.glsl"
float XV(uint t, uint e) {  // element e of row t, rotated
  const uint d = e % p.hd, hb = t * p.W + e - d;
  uint partner, i;
  bool first;
  if (!RopePair(d, p.off, p.half_, p.neox != 0u, partner, i, first)) return x[t * p.W + e];
  const float cs = intBitsToFloat(bt[p.cs_off + t * p.half_ + i]);
  const float sn = intBitsToFloat(bt[p.cs_off + p.T * p.half_ + t * p.half_ + i]);
  return RopeRotate(x[t * p.W + e], x[hb + partner], cs, sn, first);
}
#else
float XV(uint t, uint e) { return x[t * p.W + e]; }
#endif
void main() {
  const uint idx = FlatGroup() * 256u + gl_LocalInvocationID.x;
#if defined(KV_F16)
  const uint wh = p.W / 2u;
  if (idx >= p.T * wh) return;
  const uint t = idx / wh, j = idx % wh;
  const uint row = KvRow(uint(bt[p.slot_off + t]), uint(bt[p.pos_off + t]));
  c[row * wh + j] = packHalf2x16(vec2(XV(t, 2u * j), XV(t, 2u * j + 1u)));
#else
  if (idx >= p.T * p.W) return;
  const uint t = idx / p.W, j = idx % p.W;
  const uint row = KvRow(uint(bt[p.slot_off + t]), uint(bt[p.pos_off + t]));
  c[row * p.W + j] = floatBitsToUint(XV(t, j));
#endif
}
