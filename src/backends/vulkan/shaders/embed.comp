#version 450
// Embedding lookup for one row chunk of the table: out[t, d] = E[ids[t] - row0, d] for the
// tokens whose id falls in [row0, row0 + nrows) (big tables are split into chunks).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer W { uint w[]; };
layout(binding = 1) readonly buffer B { int bt[]; };
layout(binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint T, D, row0, nrows, tok_off; } p;
#define WORD(i) w[i]
#define WCOLS p.D
#include "wload.glsl"
void main() {
  const uint idx = FlatGroup() * 256u + gl_LocalInvocationID.x;
  if (idx >= p.T * p.D) return;
  const uint t = idx / p.D, d = idx % p.D;
  const int id = bt[p.tok_off + t];
  if (id < int(p.row0) || id >= int(p.row0 + p.nrows)) return;
  o[idx] = wload(uint(id - int(p.row0)) * p.D + d);
}
