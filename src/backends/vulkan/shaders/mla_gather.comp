#version 450
// MLA's non-absorbed form (ops/mla_non_absorbed.cpp), first step: the latent rows and the rope
// keys of every slot of the step, gathered from the paged cache into consecutive rows.
//   map = bt[map_off ..]: n (gathered rows, a multiple of 16), then per gathered block of 16
//   rows the cache block it comes from (WriteMlaView: each slot's blocks in order)
//   x[i*r + j]                    = C[cache row of i][j]      i < n, j < r   (f32: the GEMMs' x)
//   k[(i*H + h)*(dn+dr) + dn + j] = PE[cache row of i][j]     every head h, j < dr
//   meta = counts[H] | offsets[H] | pairs[H * rows]: head h's grouped-GEMM rows are the n pairs
//   i*H + h (x row i, output row i*H + h: the head's slice of gathered row i), from h * rows.
// Cache parts of the cache type (kv_type.glsl's KV_F32, KV_F16, KV_Q8_0, KV_Q4_0); r, dr % 4 == 0
// (% 32 for block types). Workgroups stride over the gathered rows, one row at a time.
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 128) in;
layout(binding = 0) readonly buffer C { uint cc[]; };
layout(binding = 1) readonly buffer PE { uint pe[]; };
layout(binding = 2) readonly buffer B { int bt[]; };
layout(binding = 3) writeonly buffer X { vec4 x4[]; };
layout(binding = 4) writeonly buffer K { float k[]; };
layout(binding = 5) writeonly buffer M { uint meta[]; };
#include "kv_type.glsl"
layout(push_constant) uniform P { uint r, dr, dn, H, rows, map_off; } p;
KV_LOADS(cc, CAt, CAt2, CAt4)
KV_LOADS(pe, PAt, PAt2, PAt4)

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint n = uint(bt[p.map_off]);
  if (gl_WorkGroupID.x == 0u)
    for (uint h = tid; h < p.H; h += gl_WorkGroupSize.x) {
      meta[h] = n;
      meta[p.H + h] = h * p.rows;
    }
  const uint dk = p.dn + p.dr, r4 = p.r / 4u, dr4 = p.dr / 4u;
  for (uint i = gl_WorkGroupID.x; i < n; i += gl_NumWorkGroups.x) {
    const uint row = uint(bt[p.map_off + 1u + i / 16u]) * 16u + i % 16u;
    for (uint c = tid; c < r4; c += gl_WorkGroupSize.x) x4[i * r4 + c] = CAt4(row, 4u * c, p.r);
    for (uint e = tid; e < p.H * dr4; e += gl_WorkGroupSize.x) {
      const uint h = e / dr4, c = e % dr4;
      const vec4 v = PAt4(row, 4u * c, p.dr);
      const uint o = (i * p.H + h) * dk + p.dn + 4u * c;
      [[unroll]] for (uint j = 0; j < 4u; ++j) k[o + j] = v[j];
    }
    for (uint h = tid; h < p.H; h += gl_WorkGroupSize.x) meta[2u * p.H + h * p.rows + i] = i * p.H + h;
  }
}
