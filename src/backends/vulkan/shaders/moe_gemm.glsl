// Grouped expert GEMM (ops/moe.cpp, prefill and batches): matmul_gemm.comp and
// matmul_gemm_cm.comp with MOE defined multiply, for each expert e (gl_WorkGroupID.z), the rows
// routed to it by one projection of that expert:
//   y[pair, n] = Σ_k x[pair / xdiv, k] W_e[n, k] (· wts[pair] where use_wts)
// pair = perm[offsets[e] + i], i < counts[e] (moe_compact.comp: meta = counts[E] | offsets[E] |
// perm[R * top_k]); x rows are tokens (xdiv = top_k: gate/up) or pairs (xdiv = 1: down), x_rs
// elements apart (MLA's head GEMMs: a head's slice of a row, ops/mla_attention.cpp). The
// expert's matrix m (0 gate, 1 up, 2 down) is table[6e + 2m] (which of the NB bound buffers of
// its stack) at table[6e + 2m + 1] (elements for dense types, 32-bit words for block types).
// Workgroups whose row tile starts past the expert's count return at once: the host sizes the
// grid for the most rows an expert can take (every token once).
// Before including: BM (tile rows); the kernel declares its W buffer array `wb` (binding 0) and
// X (binding 1) as it reads them. Included twice: first the bindings and this workgroup's
// expert, then (MOE_GEMM_FUNCS defined) the tile's rows and the functions, so that a kernel
// whose shared memory lives in explicit blocks (matmul_gemm_cm.comp SB) can declare the rows
// in one of them first (MOE_ROWS: it #defines moe_rows).
#ifndef MOE_GEMM_FUNCS
layout(binding = 2) readonly buffer Meta { uint meta[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };
layout(binding = 4) readonly buffer Tb { uint table[]; };
layout(binding = 5) readonly buffer Wt { float wts[]; };
layout(push_constant) uniform P { uint K, N, y_rs, E, xdiv, mat, use_wts, x_rs; } p;
const uint NB = 8u;  // ops/moe.cpp kMoeMaxBlocks
uint blk, wbase, moe_count;
#else
#ifndef MOE_ROWS
shared uint moe_rows[BM];  // pair of each tile row
#endif

// This workgroup's expert and rows; false when its tile holds none (uniform).
bool MoeBegin(uint m0) {
  const uint e = gl_WorkGroupID.z;
  moe_count = meta[e];
  if (m0 >= moe_count) return false;
  const uint off = meta[p.E + e];
  blk = table[6u * e + 2u * p.mat];
  wbase = table[6u * e + 2u * p.mat + 1u];
  for (uint i = gl_LocalInvocationID.x; i < BM; i += gl_WorkGroupSize.x)
    moe_rows[i] = m0 + i < moe_count ? meta[2u * p.E + off + m0 + i] : 0u;
  barrier();
  return true;
}
uint MoeXRow(uint tile_row) { return moe_rows[tile_row] / p.xdiv; }
uint MoeYRow(uint tile_row) { return moe_rows[tile_row]; }
float MoeScale(uint tile_row) { return p.use_wts != 0u ? wts[moe_rows[tile_row]] : 1.0; }
#endif
