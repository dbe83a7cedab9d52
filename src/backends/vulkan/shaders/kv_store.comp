#version 450
#extension GL_EXT_control_flow_attributes : require
// Writes rows of x [T, W] into a KV cache part at each row's (slot, position), addressed
// through the block tables (kv_addr.glsl), in the cache type (KV_F32, KV_F16, KV_Q8_0, KV_Q4_0:
// kv_type.glsl's layout, written by kv_write.glsl: one invocation per unit of a row).
// ROPE: x is a rope's input [T, heads * hd]; each element is rotated as rope.comp does (dims
// [off, off + 2 half) of each head, pairs as rope.glsl; cos/sin from the batch buffer's tables
// at cs_off) before it is stored.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer B { int bt[]; };
layout(binding = 2) buffer C { uint c[]; };
#include "kv_addr.glsl"
#include "kv_type.glsl"
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
float KvSrc(uint t, uint col) { return XV(t, col); }
#define KV_OUT c
#include "kv_write.glsl"
void main() {
  const uint idx = FlatGroup() * 256u + gl_LocalInvocationID.x;
  const uint units = KvWriteUnits(p.W);
  if (idx >= p.T * units) return;
  const uint t = idx / units, u = idx % units;
  KvWriteUnit(t, KvRow(uint(bt[p.slot_off + t]), uint(bt[p.pos_off + t])), u, p.W);
}
