#version 450
// out[i, c] = x[rows[i], c] for the batch's out_rows table.   x: [T, C]; out: [n, C]
#include "common.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer B { int bt[]; };
layout(binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint n, C, rows_off; } p;
void main() {
  const uint idx = FlatGroup() * 256u + gl_LocalInvocationID.x;
  if (idx >= p.n * p.C) return;
  const uint i = idx / p.C, c = idx % p.C;
  o[idx] = x[uint(bt[p.rows_off + i]) * p.C + c];
}
