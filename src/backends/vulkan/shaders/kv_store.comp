#version 450
// Writes rows of x [T, W] into a KV cache part laid out [slot][capacity][W] at each row's
// (slot, position). KV_F16 packs two halves per word (W even); KV_F32 stores floats.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer B { int bt[]; };
layout(binding = 2) writeonly buffer C { uint c[]; };
layout(push_constant) uniform P { uint T, W, capacity, slot_off, pos_off; } p;
void main() {
  const uint idx = FlatGroup() * 256u + gl_LocalInvocationID.x;
#if defined(KV_F16)
  const uint wh = p.W / 2u;
  if (idx >= p.T * wh) return;
  const uint t = idx / wh, j = idx % wh;
  const uint row = uint(bt[p.slot_off + t]) * p.capacity + uint(bt[p.pos_off + t]);
  c[row * wh + j] = packHalf2x16(vec2(x[t * p.W + 2u * j], x[t * p.W + 2u * j + 1u]));
#else
  if (idx >= p.T * p.W) return;
  const uint t = idx / p.W, j = idx % p.W;
  const uint row = uint(bt[p.slot_off + t]) * p.capacity + uint(bt[p.pos_off + t]);
  c[row * p.W + j] = floatBitsToUint(x[idx]);
#endif
}
