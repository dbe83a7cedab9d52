#version 450
// The rows of a routed batch grouped by expert, for the grouped expert GEMMs (moe_gemm.glsl's
// meta): counts[E], offsets[E] (exclusive prefix sums of the counts), then perm[n]: the pairs
// p = token * top_k + j of each expert at offsets[e] .. offsets[e] + counts[e]. The order of an
// expert's pairs is that of the atomic increments, which does not change any result (each
// output row of the GEMMs is computed the same way wherever it sits in a tile).
// A pair of routing weight 0 is left out (a head split's choice another device holds,
// moe_route.comp): no expert runs it and moe_combine.comp skips it.
// One workgroup; E <= 256.
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer Ids { int ids[]; };
layout(binding = 1) writeonly buffer Meta { uint meta[]; };
layout(binding = 2) readonly buffer Wt { float wts[]; };
layout(push_constant) uniform P { uint n, E; } p;
shared uint cnt[256];
shared uint cur[256];
void main() {
  const uint tid = gl_LocalInvocationID.x;
  if (tid < p.E) cnt[tid] = 0u;
  barrier();
  for (uint i = tid; i < p.n; i += 256u)
    if (wts[i] != 0.0) atomicAdd(cnt[uint(ids[i])], 1u);
  barrier();
  if (tid == 0u) {
    uint run = 0u;
    for (uint e = 0u; e < p.E; ++e) {
      cur[e] = run;
      meta[e] = cnt[e];
      meta[p.E + e] = run;
      run += cnt[e];
    }
  }
  barrier();
  for (uint i = tid; i < p.n; i += 256u)
    if (wts[i] != 0.0) meta[2u * p.E + atomicAdd(cur[uint(ids[i])], 1u)] = i;
}
