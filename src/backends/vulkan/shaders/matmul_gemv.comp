#version 450
// Matrix-vector product for decode (few rows): y = x Wᵀ (+ bias), optionally per head.
//   W: rows [H*N, K] of the weight type (this dispatch's chunk); x: rows with strides;
//   y[r*y_rs + h*y_hs + y_off + n0 + n] = Σ_k W[h*N + n, k] x[r*x_rs + h*x_hs + x_off + k]
//                                         (+ bias[n0 + n])
// A workgroup computes ROWS outputs n for up to RB batch rows r; TPR = WG / ROWS invocations
// share one output (a power of two chosen by the host), reduced with subgroupAdd and one
// shared-memory step where TPR is a multiple of the subgroup size. VEC reads 8 weights per load
// and x as vec4 (K % 8 == 0, x offsets and strides % 4 == 0).
// CLUSTER (the "_c" variants, quantized VEC paths only; the host takes them where TPR is below
// the device's largest subgroup size, which needs VK_SUBGROUP_FEATURE_CLUSTERED_BIT): where TPR <
// gl_SubgroupSize, a group is one cluster of TPR lanes of its subgroup (group g = invocations
// g·TPR .. g·TPR + TPR - 1, the subgroups laid out in invocation order, as the shared step also
// assumes), reduced by subgroupClusteredAdd(v, TPR): every lane ends with the full sums, and the
// group's lane 0 applies the folded norm and the epilogue and writes y itself — no shared-memory
// step, no barrier. Where TPR >= gl_SubgroupSize (a device with several subgroup sizes) the
// variant takes the shared step above. Small TPR (4, 8, 16) lets a workgroup cover WG / TPR · QR
// rows: more units per invocation, and XLOCAL's x quantization amortized over more rows.
// Fused epilogues (decode): p.epi == 1 adds res[...] (indexed as y: the residual stream) to each
// output; DUAL (VEC only) binds two weights of the same shape (gate, up) and writes
// silu(x Wgᵀ) * (x Wuᵀ), the SwiGLU of the FFN, in one pass over x. Folded RMSNorm (VEC,
// p.norm == 1): x is the norm's input; the dot products use x ⊙ g (binding 5, the norm weight)
// and are scaled by 1 / sqrt(mean(x²) + eps), the sum of squares taken by the same workgroup.
// Block-quantized weights (VEC, every W_Q* type of wload.glsl): each group of TPR invocations
// computes QR adjacent outputs (spec constant 2), so a workgroup covers ROWS * QR outputs (the
// host's group count says so); each invocation walks the rows' 8-element slices (QSlice), SPL
// consecutive slices per step (spec constant 3), reading each x vec4 once for the QR rows.
// Spec constant 4 (NSG) sizes the shared partial sums: subgroups per workgroup at the smallest
// subgroup size (the clustered reduction leaves them unused); 5 (MAGIC) picks the int-to-float
// trick of QLevels (1) or plain conversions; 6 (RB) is the number of batch rows a workgroup
// covers. CLUSTER adds none: its cluster size is TPR = WG / ROWS (ids 0 and 1).
// Integer dot products (IDOT, VEC; the dense GEMVs Q8_0, Q4_0, Q4_K, Q5_K and Q6_K — ops/matmul.cpp
// UseIdotGemv —, the experts' GEMVs (MOE) every block type): x comes quantized per 32-block by
// quantize_q8.comp (binding 1: the levels, binding 5: each block's (d, d·Σq); a folded norm is
// applied there, so p.norm is 0 here) — int8 for Q4_0 and the K-quants, int16 for Q8_0 (as the CPU
// kernels: int8 x would double Q8_0's error), see quant_x.glsl — and each invocation walks whole
// units of a row's quants — Q4_0 one block (32 weights, 16 bytes), Q8_0 half a block (16 bytes),
// Q4_1 / Q5_0 / Q5_1 one block, Q4_K / Q5_K one 64-element chunk of a 256-block (32 bytes of
// nibbles: two sub-blocks of 32, each with its 6-bit scale and min), Q6_K 64 elements of a half
// block (see UnitW) — neighbouring invocations taking neighbouring units (coalesced uvec4 loads). A
// unit's sums are exact in int32 (4x8-bit packed dot products, SPV_KHR_integer_dot_product
// through spirv_intrinsics, so any glslc with GL_EXT_spirv_intrinsics compiles it); per unit and
// QR row:
//   Q4_0: acc += dw * (dx * Σ n·q - 8 * dx·Σq)    (n: the unsigned nibbles)
//   Q8_0: acc += dw * dx * (256 Σ w·hi + Σ w·lo)  (q = 256 hi + lo: signed x unsigned products)
//   Q4_K: acc += Σ over the chunk's sub-blocks j of (d·sc_j) dx_j Σ n·q - (dmin·mn_j) dx_j·Σq
//         (the low nibbles of the chunk's 32 bytes are sub-block 2c, the high ones 2c + 1: x
//         blocks 2u and 2u + 1); Q5_K the same with n's fifth bit from the block's qh bytes
//   Q4_1 / Q5_1: acc += d dx Σ n·q + m dx·Σq;  Q5_0: acc += d (dx Σ n·q - 16 dx·Σq)
//   Q6_K: acc += d Σ over its two x blocks of dx_b Σ over their 16-element runs s sc_s Σ (n-32)·q
// QOUT (with IDOT and DUAL, x quantized apart; the host makes ROWS * QR == 32, N % 32 == 0, one
// chunk, no CLUSTER): the workgroup's 32 outputs of each batch row are also quantized as one
// 32-block in this GEMV's own x format (quant_x.glsl) — the x of the next GEMV (down_proj), which
// then needs no quantize dispatch: levels of row r, block b at qo4[(r * N / 32 + b) * XB ..],
// (d, d·Σq) at qds[r * N / 32 + b] (bindings 6 and 7).
// MOE (ops/moe.cpp): routed experts of a decode step, reading only the chosen experts' weights;
// with IDOT (every block type; the up GEMV XLOCAL and QOUT; the down GEMV's type may differ,
// reading h in the up GEMV's x format: X_I8, a Q8_0 down over int8 h) or, for every VEC type, the
// float (AccumVec) and block-type (AccumQuant) sums over x in f32 (up: the normed x, or x with
// the norm folded; down: h, written by the up GEMV in f32). Offsets in the table are words for
// block types, elements for float ones (multiples of 8: wload8). Each projection's experts are one stack (weights.h ExpertStack) bound through up to NB
// buffers (binding 0, an array); table[6e + 2m] and table[6e + 2m + 1] give expert e's matrix m
// (gate, up, down) as (buffer, word offset); ids[pair] the expert of pair = token * top_k + j and
// wts[pair] its routing weight. RB is 1; gl_WorkGroupID.x is the output row and .y the group of
// outputs, so that the rows' workgroups of one output group run side by side: rows that chose the
// same expert read its weight rows once from memory, the others from the cache (a step of 32
// tokens has ~3 choices an expert):
//   with DUAL (up: XLOCAL, QOUT): a pair; x row = its token; y[pair, i] = silu(x·gate_e[i]) * (x·up_e[i])
//     (quantized too, for the down GEMV), the folded norm applied as elsewhere.
//   without (down, x quantized by the up GEMV): a token; y[t, d] = Σ_j wts[pair_j] (h[pair_j]·down_e[d])
//     (+ res[t, d] where p.epi == 1), the top_k choices added in order, per lane before the
//     reduction (the sums are linear); IDOT: the token's choices read once into shared memory,
//     each lane's units of UN choices loaded before any is used (MoeDownUnits), weighted per unit.
// The buffer index is uniform in a workgroup (one pair or token a workgroup; the down GEMV's
// loads of one choice at a time).
// ROUTE (a MoE router's GEMV, VEC f32 / f16 / bf16 weights, one chunk; ops/moe.cpp RouteInRouterGemv): y is
// the logits [R, E] (coherent: read back here) and the routing follows in the GEMV itself — each
// workgroup, its logits written, counts itself done in cnt[row group] (binding 8, zero between
// steps); the last of a row group's workgroups routes its rows (moe_route.glsl: ids and weights,
// bindings 6 and 7; the correction bias at binding 2, the GEMV's own bias being unused) and sets
// the count back to 0. Stores, then memoryBarrierBuffer and barrier before the count, and
// memoryBarrierBuffer after it, over coherent buffers: the last workgroup sees every logit
// (the "last block" pattern; the atomic is the only cross-workgroup signal). No moe_route
// dispatch, so no barrier level of its own: the experts' up GEMV follows the router directly.
// XLOCAL (with IDOT): no separate quantization — each workgroup quantizes the x it needs into
// shared memory itself (KC elements of every batch row per step, the folded norm applied while
// quantizing, exactly as quantize_q8.comp does), so x is bound as f32 like the float GEMV's.
#ifdef IDOT
#extension GL_EXT_spirv_intrinsics : require
#endif
#ifdef CLUSTER
#extension GL_KHR_shader_subgroup_clustered : require
#endif
#include "common.glsl"
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 128;
layout(constant_id = 1) const uint ROWS = 4;
layout(constant_id = 2) const uint QR_SPEC = 2;
layout(constant_id = 3) const uint SPL = 1;
layout(constant_id = 4) const uint NSG = 32;
layout(constant_id = 5) const bool MAGIC = true;
#define QMAGIC MAGIC
// Batch rows per workgroup (1, 2, 4 or 8: the host picks the smallest that covers R, so a
// one-row decode keeps QR accumulators, not 8 * QR, and compiles to a short loop).
layout(constant_id = 6) const uint RB = 8;
// XLOCAL: elements of each batch row's x quantized into shared memory per step (a multiple of
// 32; the host makes it K where RB·K levels and their scales fit its budget).
layout(constant_id = 7) const uint KC = 4096;
// IDOT: units of each row an invocation loads before using them (1, 2 or 4; IdotUnits).
layout(constant_id = 8) const uint UN = 1;
const uint TPR = WG / ROWS;
#if defined(MOE)
#if !defined(VEC) || defined(CLUSTER) || (!defined(IDOT) && (defined(XLOCAL) || defined(QOUT)))
#error "MOE: the VEC GEMV without clusters (float and block types: no XLOCAL / QOUT)"
#endif
const uint NB = 8u;  // ops/moe.cpp kMoeMaxBlocks
layout(binding = 0) readonly buffer W { uvec4 wq[]; } wb[NB];
uint wsel = 0;
#define QUAD(i) wb[wsel].wq[i]
#define WORD(i) wb[wsel].wq[(i) >> 2][(i) & 3u]
layout(binding = 8) readonly buffer Ids { int ids[]; };
layout(binding = 9) readonly buffer Wt { float wts[]; };
layout(binding = 10) readonly buffer Tb { uint table[]; };
// This workgroup's matrices: buffer and offset (words for block types, elements for float
// ones) of the gate and up (DUAL) or the down weight; moe_woff the one being read (AccumQuant).
uint moe_blk[2], moe_off[2];
uint moe_woff = 0u;
#define WOFF moe_woff
#elif defined(DUAL)
layout(binding = 0) readonly buffer W { uvec4 wq[]; } wb[2];  // gate, up
uint wsel = 0;
#define QUAD(i) wb[wsel].wq[i]
#define WORD(i) wb[wsel].wq[(i) >> 2][(i) & 3u]
#elif defined(VEC)
layout(binding = 0) readonly buffer W { uvec4 wq[]; };
#define QUAD(i) wq[i]
#define WORD(i) wq[(i) >> 2][(i) & 3u]
#else
layout(binding = 0) readonly buffer W { uint w[]; };
#define WORD(i) w[i]
#endif
#if !defined(MOE)
#define WOFF 0u
#endif
#if defined(IDOT) && !defined(XLOCAL)
layout(binding = 1) readonly buffer X { uvec4 xq4[]; };  // quantized x, XB uvec4 per 32 (quant_x.glsl)
#elif defined(VEC)
layout(binding = 1) readonly buffer X { vec4 x4[]; };  // x offsets and strides % 4 == 0
#else
layout(binding = 1) readonly buffer X { float x[]; };
#endif
layout(binding = 2) readonly buffer Bias { float bias[]; };
#if defined(ROUTE)
#if !defined(VEC) || defined(W_QUANT) || defined(DUAL) || defined(MOE) || defined(CLUSTER)
#error "ROUTE: the float VEC GEMV only"
#endif
layout(binding = 3) coherent buffer Y { float y[]; };
layout(binding = 6) writeonly buffer RtIds { int rt_ids[]; };
layout(binding = 7) writeonly buffer RtWts { float rt_wts[]; };
layout(binding = 8) coherent buffer RtCnt { uint rt_cnt[]; };
#include "moe_route_params.glsl"
#else
layout(binding = 3) writeonly buffer Y { float y[]; };
#endif
layout(binding = 4) readonly buffer Res { float res[]; };
#if defined(IDOT) && !defined(XLOCAL)
layout(binding = 5) readonly buffer XD { vec2 xds[]; };  // per x block: (d, d * Σq)
#elif defined(VEC)
layout(binding = 5) readonly buffer G { vec4 g4[]; };
#endif
layout(push_constant) uniform P {
  uint K, N, R, n0, x_rs, x_hs, x_off, y_rs, y_hs, y_off, has_bias, epi, norm;
  float eps;
  uint top_k;  // MOE
#if defined(ROUTE)
  RouteParams rt;
#endif
} p;
#if defined(ROUTE)
#define RT_WG WG
#define RT_P p.rt
#define RT_LOGIT(r, e) y[(r) * p.y_rs + (e)]
#define RT_BIAS(e) bias[e]
#define RT_STORE(r, j, id, w)               \
  rt_ids[(r) * p.rt.top_k + (j)] = (id); \
  rt_wts[(r) * p.rt.top_k + (j)] = (w)
#include "moe_route.glsl"
shared bool rt_last;
// After this workgroup's stores: the routing of rows [r0, r0 + nr) by the last workgroup of
// their row group rg to finish (og of them; see the header).
void RouteIfLast(uint r0, uint nr, uint rg, uint og) {
  memoryBarrierBuffer();
  barrier();
  if (gl_LocalInvocationID.x == 0u) rt_last = atomicAdd(rt_cnt[rg], 1u) == og - 1u;
  barrier();
  if (!rt_last) return;  // uniform: shared
  memoryBarrierBuffer();
  for (uint r = 0u; r < nr; ++r) MoeRouteRow(r0 + r, gl_LocalInvocationID.x);
  if (gl_LocalInvocationID.x == 0u) atomicExchange(rt_cnt[rg], 0u);
}
#endif
#if defined(VEC) && (!defined(IDOT) || defined(XLOCAL))
// x[row, 4 k4 ..] (xo: the row's first vec4), times the norm weight when folding a norm.
vec4 XL(uint xo, uint k4) { return p.norm != 0u ? x4[xo + k4] * g4[k4] : x4[xo + k4]; }
#endif
#define WCOLS p.K
#include "wload.glsl"
// Outputs per invocation group: QR adjacent rows (they share each x load; matmul.cpp passes
// the same QR) for VEC weights, quantized or float (AccumVecRows); 1 for the scalar path.
#if defined(VEC)
const uint QR = QR_SPEC;
#else
const uint QR = 1u;
#endif
// Whether a folded norm was applied to x before the dot products (integer-dot paths).
#if defined(IDOT)
const bool kNormInX = true;
#else
const bool kNormInX = false;
#endif
// Partial sums per (output of the group, batch row, subgroup).
shared float part[QR * RB * NSG];
shared float part_ss[RB * NSG];
#ifdef DUAL
shared float part2[QR * RB * NSG];
#endif

#if defined(IDOT)
#if !defined(W_Q4_0) && !defined(W_Q8_0) && !defined(W_Q4_1) && !defined(W_Q5_0) && \
    !defined(W_Q5_1) && !defined(W_Q4_K) && !defined(W_Q5_K) && !defined(W_Q6_K)
#error "IDOT: the block types only"
#endif
#if defined(W_Q4_K) || defined(W_Q5_K)
#define IDOT_K 1  // 256-blocks of 64-element chunks with 6-bit scales and mins
#elif defined(W_Q6_K)
#define IDOT_K6 1  // 256-blocks of 6-bit levels, an int8 scale per 16 elements
#elif defined(W_Q4_1) || defined(W_Q5_0) || defined(W_Q5_1)
#define IDOT_B 1  // 32-blocks with a fifth bit and / or a min
#endif
#if defined(W_Q8_0) && !defined(X_I8)
#define X_I16 1  // quant_x.glsl: int16 x (X_I8: the experts' down GEMV over the int8 h of a
                 // gate/up of another type, ops/moe.cpp)
#endif
// Σ of the 4 products of packed signed bytes (OpSDotKHR, PackedVectorFormat4x8Bit).
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int SDot4x8(uint a, uint b, spirv_literal int packed_format);
int Dot4(uvec4 a, uvec4 b) {
  return SDot4x8(a.x, b.x, 0) + SDot4x8(a.y, b.y, 0) + SDot4x8(a.z, b.z, 0) + SDot4x8(a.w, b.w, 0);
}
#if defined(W_Q8_0)
// Σ of the 4 products of packed signed bytes a and unsigned bytes b (OpSUDotKHR).
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4452)
int SUDot4x8(uint a, uint b, spirv_literal int packed_format);
int DotSU4(uvec4 a, uvec4 b) {
  return SUDot4x8(a.x, b.x, 0) + SUDot4x8(a.y, b.y, 0) + SUDot4x8(a.z, b.z, 0) + SUDot4x8(a.w, b.w, 0);
}
#endif
// A unit's quants and scales (UnitW, LoadUnit: loaded for UN units before any is used) and its
// x (UnitX, LoadX), per type:
//   Q4_0 (unit: a block), Q8_0 (half a block): w the 16 quant bytes, d the block's scale;
//   Q4_1, Q5_0, Q5_1 (a block): w the nibbles, qh the fifth bits (bit j: element j), dm = (d, c)
//     with the value d·n + c (c: Q4_1 / Q5_1 the min m, Q5_0 -16 d), so the block's sum is
//     d·dx·Σ n·q + c·(dx·Σq): the min (or offset) takes the x block's sum, (d, d·Σq).y;
//   Q4_K, Q5_K (a 64-element chunk; see IdotUnitK): w, w2 the chunk's 32 bytes, hq, hq2 Q5_K's
//     fifth bits, s = (d·sc0, d·sc1, dmin·mn0, dmin·mn1) decoded once per chunk;
//   Q6_K (64 elements: half hf of a 256-block, its part pp = 0 / 1): w, w2 the 32 ql bytes
//     32pp .. 32pp + 31 of the half (low nibbles: elements 32pp + l, high: 64 + 32pp + l), h, h2
//     the half's 32 qh bytes (bits 2pp, 2pp + 1: the low nibble's element, 4 + 2pp ..: the high
//     one's), sc the four int8 scales of those 16-element runs, d the block's scale. Levels q - 32
//     as signed bytes, so Σ (q - 32)·x needs no sum of x over 16 elements.
#if defined(IDOT_K) || defined(IDOT_K6)
const uint kUnitElems = 64u;  // units: 64 elements, two x blocks (a0, c0: the first's halves)
struct UnitX { uvec4 a0, c0, a1, c1; vec4 dx; };
#else
#if defined(W_Q8_0)
const uint kUnitElems = 16u;  // units: half blocks
#else
const uint kUnitElems = 32u;  // units: blocks
#endif
struct UnitX { uvec4 a, c; vec2 dx; };
#endif
#if defined(IDOT_K)
struct UnitW { uvec4 w, w2, hq, hq2; vec4 s; };
#elif defined(IDOT_K6)
struct UnitW { uvec4 w, w2, h, h2; ivec4 sc; float d; };
#elif defined(IDOT_B)
struct UnitW { uvec4 w; uint qh; vec2 dm; };
#else
struct UnitW { uvec4 w; float d; };
#endif
#if defined(IDOT_K)
// Chunk u of a row (sub-blocks 2c, 2c + 1 of block u / 4, c = u % 4) against x blocks 2u, 2u + 1:
// w, w2 the chunk's two uvec4 of quants (bytes 0-15: elements 0-15 of both sub-blocks in the low
// / high nibbles; bytes 16-31: elements 16-31); Q5_K: hq, hq2 the fifth bits of those bytes'
// elements (bit 0 of each byte: the low nibble's, bit 1: the high one's); s = (d·sc0, d·sc1,
// dmin·mn0, dmin·mn1); xa0, xa1 x block 2u's halves, xc0, xc1 block 2u + 1's; dx their (d, d·Σq).
uvec4 KLo(uvec4 w, uvec4 hq) {
#if defined(W_Q5_K)
  return (w & 0x0F0F0F0Fu) | ((hq & 0x01010101u) << 4);
#else
  return w & 0x0F0F0F0Fu;
#endif
}
uvec4 KHi(uvec4 w, uvec4 hq) {
#if defined(W_Q5_K)
  return ((w >> 4) & 0x0F0F0F0Fu) | ((hq & 0x02020202u) << 3);
#else
  return (w >> 4) & 0x0F0F0F0Fu;
#endif
}
float IdotUnitK(uvec4 w, uvec4 w2, uvec4 hq, uvec4 hq2, vec4 s, uvec4 xa0, uvec4 xa1, uvec4 xc0,
                uvec4 xc1, vec4 dx) {
  const int lo = Dot4(KLo(w, hq), xa0) + Dot4(KLo(w2, hq2), xa1);
  const int hi = Dot4(KHi(w, hq), xc0) + Dot4(KHi(w2, hq2), xc1);
  return s.x * dx.x * float(lo) + s.y * dx.z * float(hi) - (s.z * dx.y + s.w * dx.w);
}
// The scales of chunk u of the row at word `base` (wload.glsl's Q4_K / Q5_K meta words).
vec4 Q4KScales(uint base, uint K, uint u) {
  const uint mo = base + QMetaOff(K) + (u >> 2) * 5u;
  const vec2 dd = unpackHalf2x16(WORD(mo));
  const uint sm = WORD(mo + 1u + (u & 3u));
  return vec4(dd.x * float(sm & 63u), dd.x * float((sm >> 16) & 63u), dd.y * float((sm >> 8) & 63u),
              dd.y * float((sm >> 24) & 63u));
}
#endif
#if defined(IDOT_K6)
// 6-bit levels q (bytes 0..63) as the signed bytes q - 32: +128 by OR, -32 without borrows, -128
// by XOR.
uvec4 Q6Signed(uvec4 q) { return ((q | 0x80808080u) - 0x20202020u) ^ 0x80808080u; }
#endif
#if defined(IDOT_B) && (defined(W_Q5_0) || defined(W_Q5_1))
// Bits 0-15 of h as the fifth bits (bit 4 of each byte) of elements 0-15: word i of the result
// holds bits 4i .. 4i + 3 in its bytes (the multiply moves bit j of a nibble to bit 8j - 7j).
uvec4 Q5Bits(uint h) {
  return ((((uvec4(h) >> uvec4(0u, 4u, 8u, 12u)) & 0xFu) * 0x00204081u) & 0x01010101u) << 4;
}
#endif
// Unit u of the row at word b (LoadUnit) dotted with its x (DotUnit).
UnitW LoadUnit(uint b, uint K, uint u) {
  UnitW o;
#if defined(IDOT_K)
  o.w = QUAD(b / 4u + 2u * u);
  o.w2 = QUAD(b / 4u + 2u * u + 1u);
  o.s = Q4KScales(b, K, u);
#if defined(W_Q5_K)
  // The block's 32 qh bytes; chunk c's bits are 2c and 2c + 1 of each.
  const uint hb = (b + QHighOff(K)) / 4u + 2u * (u >> 2), sh = 2u * (u & 3u);
  o.hq = (QUAD(hb) >> sh) & 0x03030303u;
  o.hq2 = (QUAD(hb + 1u) >> sh) & 0x03030303u;
#else
  o.hq = uvec4(0u);
  o.hq2 = uvec4(0u);
#endif
#elif defined(IDOT_K6)
  // u = 4 sb + 2 hf + pp: its ql bytes are the row's uvec4 2u, 2u + 1 (64 per block, 32 per half).
  const uint sb = u >> 2, hf = (u >> 1) & 1u;
  o.w = QUAD(b / 4u + 2u * u);
  o.w2 = QUAD(b / 4u + 2u * u + 1u);
  const uint hb = (b + QHighOff(K)) / 4u + 4u * sb + 2u * hf;
  // Shifted by 2 pp: bits 0-1 of each byte the low nibble's two high bits, 4-5 the high one's.
  const uint hs = 2u * (u & 1u);
  o.h = (QUAD(hb) >> hs) & 0x33333333u;
  o.h2 = (QUAD(hb + 1u) >> hs) & 0x33333333u;
  // Scales 8 hf + 2 pp, + 1 (low nibbles) and + 4, + 5 (high ones): bytes 2 pp, 2 pp + 1 of the
  // block's scale words 2 hf and 2 hf + 1.
  const uint so = b + QMetaOff(K) + sb * 4u + 2u * hf, sh = 16u * (u & 1u);
  const uint s0 = WORD(so) >> sh, s1 = WORD(so + 1u) >> sh;
  o.sc = ivec4(int(s0 << 24) >> 24, int(s0 << 16) >> 24, int(s1 << 24) >> 24, int(s1 << 16) >> 24);
  o.d = QScale(b, K, sb);
#elif defined(IDOT_B)
  o.w = QUAD(b / 4u + u);
#if defined(W_Q5_0) || defined(W_Q5_1)
  o.qh = WORD(b + QHighOff(K) + u);
#else
  o.qh = 0u;
#endif
#if defined(W_Q5_0)
  const float d = QScale(b, K, u);
  o.dm = vec2(d, -16.0 * d);
#else
  o.dm = unpackHalf2x16(WORD(b + QMetaOff(K) + u));
#endif
#else
  o.w = QUAD(b / 4u + u);
  o.d = QScale(b, K, u * kUnitElems / 32u);
#endif
  return o;
}
float DotUnit(UnitW o, UnitX x) {
#if defined(IDOT_K)
  return IdotUnitK(o.w, o.w2, o.hq, o.hq2, o.s, x.a0, x.c0, x.a1, x.c1, x.dx);
#elif defined(IDOT_K6)
  const uvec4 l0 = Q6Signed((o.w & 0x0F0F0F0Fu) | ((o.h & 0x03030303u) << 4));
  const uvec4 l1 = Q6Signed((o.w2 & 0x0F0F0F0Fu) | ((o.h2 & 0x03030303u) << 4));
  const uvec4 h0 = Q6Signed(((o.w >> 4) & 0x0F0F0F0Fu) | (o.h & 0x30303030u));
  const uvec4 h1 = Q6Signed(((o.w2 >> 4) & 0x0F0F0F0Fu) | (o.h2 & 0x30303030u));
  // Exact in int32 and in f32: |Σ| <= 2 · 128 · 16 · 32 · 127 < 2^24.
  const int lo = o.sc.x * Dot4(l0, x.a0) + o.sc.y * Dot4(l1, x.c0);
  const int hi = o.sc.z * Dot4(h0, x.a1) + o.sc.w * Dot4(h1, x.c1);
  return o.d * (x.dx.x * float(lo) + x.dx.z * float(hi));
#elif defined(IDOT_B)
  uvec4 lo = o.w & 0x0F0F0F0Fu, hi = (o.w >> 4) & 0x0F0F0F0Fu;
#if defined(W_Q5_0) || defined(W_Q5_1)
  lo |= Q5Bits(o.qh);
  hi |= Q5Bits(o.qh >> 16);
#endif
  return o.dm.x * x.dx.x * float(Dot4(lo, x.a) + Dot4(hi, x.c)) + o.dm.y * x.dx.y;
#elif defined(W_Q4_0)
  // Q4_0: xa, xc the int8 x of the block's two halves.
  return o.d * (x.dx.x * float(Dot4(o.w & 0x0F0F0F0Fu, x.a) + Dot4((o.w >> 4) & 0x0F0F0F0Fu, x.c)) -
                8.0 * x.dx.y);
#else
  // Q8_0: x in int16 (quant_x.glsl X_I16), a its high bytes (signed), c its low (unsigned):
  // Σ w·q = 256 Σ w·hi + Σ w·lo, exact in int32 (16 · 127 · 32512 < 2^31).
#if defined(X_I16)
  return o.d * (x.dx.x * float(Dot4(o.w, x.a) * 256 + DotSU4(o.w, x.c)));
#else
  return o.d * (x.dx.x * float(Dot4(o.w, x.a)));  // X_I8
#endif
#endif
}
#if defined(XLOCAL)
#define QX_X4 1  // quant_x.glsl's QuantizeXBlock over x4, g4
#endif
#include "quant_x.glsl"
#if defined(QOUT)
#if !defined(DUAL) || (defined(XLOCAL) && !defined(MOE)) || defined(CLUSTER)
#error "QOUT: the dual GEMV over x quantized apart (or the experts' up GEMV) only"
#endif
layout(binding = 6) writeonly buffer QO { uvec4 qo4[]; };
layout(binding = 7) writeonly buffer QD { vec2 qds[]; };
shared float qout[RB * 32u];  // the workgroup's outputs: batch row r at r * 32
#endif
#if defined(XLOCAL)
shared uvec4 xs4[RB * (KC / 32u) * XB];  // quantized x of the step: row r at r * (KC / 32) * XB
shared vec2 xsd[RB * KC / 32u];          // (d, d * Σq) per block: row r at r * KC / 32
// The j-th uvec4 (of XB) and (d, d·Σq) of 32-block b of the step of batch row r (this
// workgroup's), from shared memory.
uvec4 XQuad(uint r, uint b, uint j) { return xs4[(r * (KC / 32u) + b) * XB + j]; }
vec2 XScale(uint r, uint b) { return xsd[r * (KC / 32u) + b]; }
#else
// The same for row r of the x quantized by quantize_q8.comp (one step).
uvec4 XQuad(uint r, uint b, uint j) { return xq4[(r * (p.K / 32u) + b) * XB + j]; }
vec2 XScale(uint r, uint b) { return xds[r * (p.K / 32u) + b]; }
#endif
// The x of unit u of batch row r, in the step starting at unit u0.
UnitX LoadX(uint r, uint u, uint u0) {
  UnitX x;
  const uint ul = u - u0;
#if defined(IDOT_K) || defined(IDOT_K6)
  // Q4_K / Q5_K: blocks 2u, 2u + 1; Q6_K: 2u - pp and 2u - pp + 2 (its low and high nibbles).
  // Steps hold whole 256-blocks (IdotLocalStep), so ul and u have the same pp.
#if defined(IDOT_K6)
  const uint b0 = 2u * ul - (ul & 1u), b1 = b0 + 2u;
#else
  const uint b0 = 2u * ul, b1 = b0 + 1u;
#endif
  x.a0 = XQuad(r, b0, 0u);
  x.c0 = XQuad(r, b0, 1u);
  x.a1 = XQuad(r, b1, 0u);
  x.c1 = XQuad(r, b1, 1u);
  x.dx = vec4(XScale(r, b0), XScale(r, b1));
#elif defined(W_Q8_0)
  // Half block ul & 1 of block ul / 2: its hi bytes (quad ul & 1) and lo bytes (quad 2 + (ul & 1));
  // int8 x: its levels (quad ul & 1).
  x.a = XQuad(r, ul >> 1, ul & 1u);
#if defined(X_I16)
  x.c = XQuad(r, ul >> 1, 2u + (ul & 1u));
#else
  x.c = x.a;
#endif
  x.dx = XScale(r, ul >> 1);
#else
  x.a = XQuad(r, ul, 0u);
  x.c = XQuad(r, ul, 1u);
  x.dx = XScale(r, ul);
#endif
  return x;
}
// acc[i][r] += Σ over this invocation's units u in [u0, u1) (lane, lane + TPR, ...) of row i of
// the group (quants at word base[i]) times batch row xr0 + r of x (LoadX); DUAL: the gate weight
// into acc, the up weight into acc2.
void IdotUnits(uint u0, uint u1, const uint base[QR], uint xr0, uint nr, uint lane,
               inout float acc[QR][RB]
#if defined(DUAL)
               , inout float acc2[QR][RB]
#endif
) {
  const uint K = p.K;
#if defined(DUAL)
  for (uint sel = 0; sel < 2u; ++sel) {
#if defined(MOE)
    wsel = moe_blk[sel];
    const uint mo = moe_off[sel];
#else
    wsel = sel;
    const uint mo = 0u;
#endif
#elif defined(MOE)
  wsel = moe_blk[0];
  const uint mo = moe_off[0];
#else
  const uint mo = 0u;
#endif
  for (uint ub = u0 + lane; ub < u1; ub += UN * TPR) {
    // UN units' quants and scales first (past u1: the last unit again, not added), then the sums.
    UnitW w[UN * QR];
    for (uint h = 0; h < UN; ++h) {
      const uint u = min(ub + h * TPR, u1 - 1u);
      for (uint i = 0; i < QR; ++i) w[h * QR + i] = LoadUnit(base[i] + mo, K, u);
    }
    for (uint h = 0; h < UN; ++h) {
      const uint u = ub + h * TPR;
      if (u >= u1) break;
      for (uint r = 0; r < RB; ++r) {
        if (r < nr) {
          const UnitX x = LoadX(xr0 + r, u, u0);
          for (uint i = 0; i < QR; ++i) {
            const float v = DotUnit(w[h * QR + i], x);
#if defined(DUAL)
            if (sel == 0u) acc[i][r] += v; else acc2[i][r] += v;
#else
            acc[i][r] += v;
#endif
          }
        }
      }
    }
  }
#if defined(DUAL)
  }
#endif
}
#if defined(MOE) && !defined(DUAL)
// The down GEMV's token's choices (read once by its first top_k invocations, ops/moe.cpp
// kMoeGemvMaxChoices): buffer, word offset of the expert's down matrix, routing weight.
// Only the choices of nonzero weight (moe_nc of them; moe_cj: which choice): a pair of weight 0
// has no h row (the up GEMV skips it).
shared uint moe_cb[8], moe_co[8], moe_cj[8], moe_nc;
shared float moe_cw[8];
// acc[i][0] += Σ over the token's choices j of wts[j] · (h[pair j] · row rows[i] of expert j's
// down matrix) over this invocation's units: UN choices' units loaded before any is used (their
// buffer index is uniform: one choice a load), so a lane keeps UN experts' reads in flight.
void MoeDownUnits(const uint rows[QR], uint r0, uint lane, inout float acc[QR][RB]) {
  const uint K = p.K, nu = K / kUnitElems;
  const uint nc = moe_nc;
  for (uint j0 = 0u; j0 < nc; j0 += UN) {
    for (uint u = lane; u < nu; u += TPR) {
      UnitW w[UN * QR];
      for (uint h = 0; h < UN; ++h) {
        const uint j = min(j0 + h, nc - 1u);
        wsel = moe_cb[j];
        for (uint i = 0; i < QR; ++i) w[h * QR + i] = LoadUnit(moe_co[j] + rows[i], K, u);
      }
      for (uint h = 0; h < UN; ++h) {
        const uint j = j0 + h;
        if (j >= nc) break;
        const UnitX x = LoadX(r0 * p.top_k + moe_cj[j], u, 0u);
        for (uint i = 0; i < QR; ++i) acc[i][0] += moe_cw[j] * DotUnit(w[h * QR + i], x);
      }
    }
  }
}
#endif
#if !defined(XLOCAL)
// acc[i][r] += Σ over this invocation's units of row row0 + i (rows past `last` read `last`)
// times batch row r0 + r of the quantized x (see the header).
void AccumIdot(uint row0, uint last, uint r0, uint nr, uint lane, inout float acc[QR][RB]
#if defined(DUAL)
               , inout float acc2[QR][RB]
#endif
) {
  uint base[QR];
  for (uint i = 0; i < QR; ++i) base[i] = min(row0 + i, last) * QRowWords(p.K);
#if defined(DUAL)
  IdotUnits(0u, p.K / kUnitElems, base, r0, nr, lane, acc, acc2);
#else
  IdotUnits(0u, p.K / kUnitElems, base, r0, nr, lane, acc);
#endif
}
#else
// Every invocation of the workgroup calls this (barriers inside). Per step of KC elements: the
// workgroup quantizes that part of each batch row into shared memory, then every group walks its
// units of it (IdotUnits, as AccumIdot).
void AccumIdotLocal(uint row0, uint last, uint xb, uint nr, uint tid, uint lane,
                    inout float acc[QR][RB]
#if defined(DUAL)
                    , inout float acc2[QR][RB]
#endif
) {
  const uint K = p.K, rw = QRowWords(K);
  uint base[QR];
  for (uint i = 0; i < QR; ++i) base[i] = min(row0 + i, last) * rw;
  // Folded norm: x ⊙ g is quantized (the int8 levels of the normed x are the same, their scales
  // 1/rms times larger), Σx² taken on the way; the sums are scaled by 1/rms at the end.
  float ssq[RB];
  for (uint r = 0; r < RB; ++r) ssq[r] = 0.0;
  for (uint c0 = 0; c0 < K; c0 += KC) {
    const uint kc = min(KC, K - c0), nbc = kc / 32u;
    if (c0 > 0u) barrier();  // the previous step's x is no longer read
    for (uint r = 0; r < RB; ++r) {
      for (uint b = tid; b < nbc && r < nr; b += WG) {
        const uint xo = (xb + r * p.x_rs + c0) / 4u + 8u * b, go = (c0 / 4u) + 8u * b;
        uvec4 q[XB];
        QuantizeXBlock(xo, go, p.norm != 0u, ssq[r], q, xsd[r * (KC / 32u) + b]);
        for (uint j = 0; j < XB; ++j) xs4[(r * (KC / 32u) + b) * XB + j] = q[j];
      }
    }
    barrier();
    const uint u0 = c0 / kUnitElems, u1 = u0 + kc / kUnitElems;
#if defined(DUAL)
    IdotUnits(u0, u1, base, 0u, nr, lane, acc, acc2);
#else
    IdotUnits(u0, u1, base, 0u, nr, lane, acc);
#endif
  }
  if (p.norm != 0u) {
    for (uint r = 0; r < RB; ++r) {
      if (r >= nr) break;  // uniform: WgSum's barriers
      const float inv = 1.0 / sqrt(WgSum(ssq[r]) / float(K) + p.eps);
      for (uint i = 0; i < QR; ++i) {
        acc[i][r] *= inv;
#if defined(DUAL)
        acc2[i][r] *= inv;
#endif
      }
    }
  }
}
#endif
#elif defined(VEC) && defined(W_QUANT)
// Block-quantized rows (wload.glsl's repacked layout) by 8-element slices: slice s of each of
// the QR rows is unpacked once (levels as floats, its scales), then every batch row's two x vec4
// are read once and dotted with all QR rows; scales apply to the 4-element group sums (mins to
// the sums of x). Rows past `last` read `last` instead.
void AccumQuant(uint row0, uint last, uint xb, uint nr, uint lane, inout float acc[QR][RB]) {
  const uint K = p.K, ns = K / 8u, rw = QRowWords(K);  // K % 32 == 0: ns % SPL == 0
  uint base[QR];
  for (uint i = 0; i < QR; ++i) base[i] = WOFF + min(row0 + i, last) * rw;
  for (uint s0 = lane * SPL; s0 < ns; s0 += TPR * SPL) {
    for (uint j = 0; j < SPL; ++j) {
      const uint s = s0 + j;
      vec4 q0[QR], q1[QR], dm[QR];
      uint k0, k1;
      for (uint i = 0; i < QR; ++i) QSlice(base[i], K, s, q0[i], q1[i], k0, k1, dm[i]);
      for (uint r = 0; r < RB; ++r) {
        if (r < nr) {
          const uint xo = (xb + r * p.x_rs) / 4u;
          const vec4 x0 = XL(xo, k0 / 4u), x1 = XL(xo, k1 / 4u);
#if defined(QHAS_MIN)
          const float sx0 = x0.x + x0.y + x0.z + x0.w, sx1 = x1.x + x1.y + x1.z + x1.w;
#endif
          for (uint i = 0; i < QR; ++i) {
#if defined(QSAME_D) && defined(QHAS_MIN)
            acc[i][r] += dm[i].x * (dot(q0[i], x0) + dot(q1[i], x1)) + dm[i].y * (sx0 + sx1);
#elif defined(QSAME_D)
            acc[i][r] += dm[i].x * (dot(q0[i], x0) + dot(q1[i], x1));
#elif defined(QHAS_MIN)
            acc[i][r] += dm[i].x * dot(q0[i], x0) + dm[i].z * dot(q1[i], x1) + dm[i].y * sx0 +
                         dm[i].w * sx1;
#else
            acc[i][r] += dm[i].x * dot(q0[i], x0) + dm[i].z * dot(q1[i], x1);
#endif
          }
        }
      }
    }
  }
}
#elif defined(VEC)
// acc[r] += Σ over this invocation's share of k of W[row, k] x[r, k] (W: wload8's buffer).
void AccumVec(uint wrow, uint xb, uint nr, uint lane, inout float acc[RB]) {
  // Two groups of 8 weights in flight per invocation; x read as vec4.
  const uint nq = p.K / 8u;
  uint q = lane;
  for (; q + TPR < nq; q += 2u * TPR) {
    float v[8], u[8];
    wload8(wrow / 8u + q, v);
    wload8(wrow / 8u + q + TPR, u);
    for (uint r = 0; r < RB; ++r) {
      if (r < nr) {
        const uint xo = (xb + r * p.x_rs) / 4u;
        const vec4 a0 = XL(xo, 2u * q), a1 = XL(xo, 2u * q + 1u);
        const vec4 b0 = XL(xo, 2u * (q + TPR)), b1 = XL(xo, 2u * (q + TPR) + 1u);
        acc[r] += dot(vec4(v[0], v[1], v[2], v[3]), a0) + dot(vec4(v[4], v[5], v[6], v[7]), a1) +
                  dot(vec4(u[0], u[1], u[2], u[3]), b0) + dot(vec4(u[4], u[5], u[6], u[7]), b1);
      }
    }
  }
  if (q < nq) {
    float v[8];
    wload8(wrow / 8u + q, v);
    for (uint r = 0; r < RB; ++r) {
      if (r < nr) {
        const uint xo = (xb + r * p.x_rs) / 4u;
        acc[r] += dot(vec4(v[0], v[1], v[2], v[3]), XL(xo, 2u * q)) +
                  dot(vec4(v[4], v[5], v[6], v[7]), XL(xo, 2u * q + 1u));
      }
    }
  }
}
#if defined(DUAL) || defined(MOE)
#define SELW(s) wsel = (s)
#else
#define SELW(s)
#endif
// QR > 1: acc[i][r] += W[row i] · x[r] for the QR rows row i = min(row0 + i, last), at element
// off + row i * K of buffer sel (the MOE / DUAL array's; else the one weight), each x vec4 read
// once for all of them and the step's QR (DUAL: 2 QR) weight loads issued before any is used.
// DUAL: acc2 from the second matrix (sel2, off2), same rows.
void AccumVecRows(uint sel, uint off,
#if defined(DUAL)
                  uint sel2, uint off2,
#endif
                  uint row0, uint last, uint xb, uint nr, uint lane, inout float acc[QR][RB]
#if defined(DUAL)
                  , inout float acc2[QR][RB]
#endif
) {
  const uint nq = p.K / 8u;
  for (uint q = lane; q < nq; q += TPR) {
    float v[QR][8];
    SELW(sel);
    for (uint i = 0u; i < QR; ++i) wload8((off + min(row0 + i, last) * p.K) / 8u + q, v[i]);
#if defined(DUAL)
    float u[QR][8];
    SELW(sel2);
    for (uint i = 0u; i < QR; ++i) wload8((off2 + min(row0 + i, last) * p.K) / 8u + q, u[i]);
#endif
    for (uint r = 0u; r < RB; ++r) {
      if (r < nr) {
        const uint xo = (xb + r * p.x_rs) / 4u;
        const vec4 a0 = XL(xo, 2u * q), a1 = XL(xo, 2u * q + 1u);
        for (uint i = 0u; i < QR; ++i) {
          acc[i][r] += dot(vec4(v[i][0], v[i][1], v[i][2], v[i][3]), a0) +
                       dot(vec4(v[i][4], v[i][5], v[i][6], v[i][7]), a1);
#if defined(DUAL)
          acc2[i][r] += dot(vec4(u[i][0], u[i][1], u[i][2], u[i][3]), a0) +
                        dot(vec4(u[i][4], u[i][5], u[i][6], u[i][7]), a1);
#endif
        }
      }
    }
  }
}
#endif

// y of output ni of batch row r from its full dot products (norm scale applied): s, and for DUAL
// s2 the up projection's (silu(s) * s2); else s + bias (p.has_bias) + the residual (p.epi == 1).
// Returns the value written.
float Store(uint h, uint r, uint ni, float s, float s2) {
  const uint yi = r * p.y_rs + h * p.y_hs + p.y_off + p.n0 + ni;
#ifdef DUAL
  const float v = s / (1.0 + exp(-s)) * s2;
#else
  const float b = p.has_bias != 0u ? bias[p.n0 + ni] : 0.0;
  const float v = s + b + (p.epi == 1u ? res[yi] : 0.0);
#endif
  y[yi] = v;
  return v;
}
#if defined(CLUSTER)
// Σ of v over this invocation's cluster of TPR lanes (TPR < gl_SubgroupSize, a power of two).
// The cluster size must be a literal constant (glslang rejects a specialization constant); TPR
// is one, so the driver keeps one branch.
float ClusterSum(float v) {
  if (TPR == 4u) return subgroupClusteredAdd(v, 4u);
  if (TPR == 8u) return subgroupClusteredAdd(v, 8u);
  if (TPR == 16u) return subgroupClusteredAdd(v, 16u);
  if (TPR == 32u) return subgroupClusteredAdd(v, 32u);
  return subgroupClusteredAdd(v, 64u);
}
#endif

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint g = tid / TPR, lane = tid % TPR;
#if defined(MOE)
  const uint ogx = gl_WorkGroupID.y;  // the rows run side by side (see the header)
#else
  // Batch rows past RB: row groups of RB rows, in z, or interleaved in x where the host chose so
  // (gl_NumWorkGroups.z == 1 with R > RB): the row groups of one output group then run side by
  // side and read its weight rows once from memory, the others from the cache.
  const uint nrg = (p.R + RB - 1u) / RB;
  const bool inter = gl_NumWorkGroups.z == 1u && nrg > 1u;
  const uint ogx = inter ? gl_WorkGroupID.x / nrg : gl_WorkGroupID.x;
  const uint rg = inter ? gl_WorkGroupID.x % nrg : gl_WorkGroupID.z;
#endif
  const uint n = (ogx * ROWS + g) * QR;  // this group's first output
#if defined(MOE)
  // The output row (a pair for the up GEMV, a token for the down GEMV; see the header), RB == 1.
  const uint h = 0u, r0 = gl_WorkGroupID.x, nr = 1u;
#if defined(DUAL)
  const uint xr0 = r0 / p.top_k;  // the pair's token
  // A pair of weight 0 adds nothing (a head split's choice another device holds, moe_route.comp):
  // no h row; the down GEMV skips it too. Uniform: the workgroup leaves before any barrier.
  if (wts[r0] == 0.0) return;
  {
    const uint e = uint(ids[r0]);
    moe_blk[0] = table[6u * e];
    moe_off[0] = table[6u * e + 1u];
    moe_blk[1] = table[6u * e + 2u];
    moe_off[1] = table[6u * e + 3u];
  }
#else
  const uint xr0 = r0;  // the down GEMV's x rows are pairs, taken per choice below
#endif
#else
  const uint h = gl_WorkGroupID.y;
  const uint r0 = rg * RB;
  const uint nr = min(RB, p.R - r0);  // uniform in the workgroup
  const uint xr0 = r0;  // the first batch row of x
#endif
#if defined(MOE) && defined(IDOT) && !defined(DUAL)
  if (tid == 0u) {  // the token's choices of nonzero weight, in order, for every output
    uint nc = 0u;
    for (uint j = 0u; j < p.top_k; ++j) {
      const uint pair = r0 * p.top_k + j, e = uint(ids[pair]);
      const float wj = wts[pair];
      if (wj == 0.0) continue;
      moe_cb[nc] = table[6u * e + 4u];
      moe_co[nc] = table[6u * e + 5u];
      moe_cw[nc] = wj;
      moe_cj[nc] = j;
      ++nc;
    }
    moe_nc = nc;
  }
  barrier();
#endif
  float acc[QR][RB];
  for (uint i = 0; i < QR; ++i)
    for (uint r = 0; r < RB; ++r) acc[i][r] = 0.0;
#ifdef DUAL
  float acc2[QR][RB];
  for (uint i = 0; i < QR; ++i)
    for (uint r = 0; r < RB; ++r) acc2[i][r] = 0.0;
#endif
#if defined(XLOCAL)
  {  // every invocation: the x quantization has barriers; rows past N re-read row N - 1
    const uint xb = xr0 * p.x_rs + h * p.x_hs + p.x_off;
    const uint row0 = h * p.N + min(n, p.N - 1u), last = h * p.N + p.N - 1u;
#if defined(DUAL)
    AccumIdotLocal(row0, last, xb, nr, tid, lane, acc, acc2);
#else
    AccumIdotLocal(row0, last, xb, nr, tid, lane, acc);
#endif
  }
#else
  if (n < p.N) {
    const uint xb = xr0 * p.x_rs + h * p.x_hs + p.x_off;
#if defined(IDOT)
    const uint row0 = h * p.N + n, last = h * p.N + p.N - 1u;
#if defined(MOE)
    // The down GEMV: the token's top_k choices, each weighted per unit.
    uint rows[QR];
    for (uint i = 0; i < QR; ++i) rows[i] = min(row0 + i, last) * QRowWords(p.K);
    MoeDownUnits(rows, r0, lane, acc);
#elif defined(DUAL)
    AccumIdot(row0, last, r0, nr, lane, acc, acc2);
#else
    AccumIdot(row0, last, r0, nr, lane, acc);
#endif
#elif defined(MOE)
    // Float and block-type experts: the up GEMV reads the pair's gate and up matrices (x: the
    // pair's token), the down GEMV each of the token's choices in order (x: the pair's h row),
    // weighted per lane (the sums are linear).
#if defined(W_QUANT)
    const uint row0 = n, last = p.N - 1u;
#define MOE_ACCUM(x0, t) AccumQuant(row0, last, x0, 1u, lane, t)
#else
#define MOE_ACCUM(x0, t) AccumVec(moe_woff + n * p.K, x0, 1u, lane, t[0])
#endif
#if defined(DUAL)
#if !defined(W_QUANT)
    if (QR > 1u) {
      AccumVecRows(moe_blk[0], moe_off[0], moe_blk[1], moe_off[1], n, p.N - 1u, xb, 1u, lane, acc,
                   acc2);
    } else
#endif
    {
      wsel = moe_blk[0];
      moe_woff = moe_off[0];
      MOE_ACCUM(xb, acc);
      wsel = moe_blk[1];
      moe_woff = moe_off[1];
      MOE_ACCUM(xb, acc2);
    }
#else
    for (uint j = 0; j < p.top_k; ++j) {
      const uint pair = r0 * p.top_k + j, e = uint(ids[pair]);
      const float wj = wts[pair];
      if (wj == 0.0) continue;  // no h row (uniform: the workgroup's token)
      wsel = table[6u * e + 4u];
      moe_woff = table[6u * e + 5u];
      float t[QR][RB];
      for (uint i = 0; i < QR; ++i) t[i][0] = 0.0;
      MOE_ACCUM(pair * p.x_rs, t);  // QR 1 for float experts (ops/matmul.cpp MoeGemvFor)
      for (uint i = 0; i < QR; ++i) acc[i][0] += wj * t[i][0];
    }
#endif
#undef MOE_ACCUM
#elif defined(VEC) && defined(W_QUANT)
    // Rows past N (the last group of the last workgroup) re-read row N - 1; not written.
    const uint row0 = h * p.N + n, last = h * p.N + p.N - 1u;
#if defined(DUAL)
    wsel = 0u;
    AccumQuant(row0, last, xb, nr, lane, acc);
    wsel = 1u;
    AccumQuant(row0, last, xb, nr, lane, acc2);
#else
    AccumQuant(row0, last, xb, nr, lane, acc);
#endif
#else
    const uint wrow = (h * p.N + n) * p.K;
#if defined(DUAL)
    if (QR > 1u) {
      AccumVecRows(0u, 0u, 1u, 0u, h * p.N + n, h * p.N + p.N - 1u, xb, nr, lane, acc, acc2);
    } else {
      wsel = 0u;
      AccumVec(wrow, xb, nr, lane, acc[0]);
      wsel = 1u;
      AccumVec(wrow, xb, nr, lane, acc2[0]);
    }
#elif defined(VEC)
    if (QR > 1u)
      AccumVecRows(0u, 0u, h * p.N + n, h * p.N + p.N - 1u, xb, nr, lane, acc);
    else
      AccumVec(wrow, xb, nr, lane, acc[0]);
#else
    for (uint k = lane; k < p.K; k += TPR) {
      const float wv = wload(wrow + k);
      for (uint r = 0; r < RB; ++r)
        if (r < nr) acc[0][r] += wv * x[xb + r * p.x_rs + k];
    }
#endif
#endif
  }
#endif
  // Folded RMSNorm: this invocation's share of Σ x² per row (the group covers all of K).
  float ss[RB];
  for (uint r = 0; r < RB; ++r) ss[r] = 0.0;
#if defined(VEC) && !defined(IDOT)
  if (p.norm != 0u && n < p.N) {
    for (uint r = 0; r < RB; ++r) {
      if (r < nr) {
        const uint xo = (xr0 * p.x_rs + r * p.x_rs) / 4u;
        for (uint k4 = lane; k4 < p.K / 4u; k4 += TPR) ss[r] += dot(x4[xo + k4], x4[xo + k4]);
      }
    }
  }
#endif
#if defined(CLUSTER)
  if (TPR < gl_SubgroupSize) {  // uniform: the group is one cluster of its subgroup (header)
    for (uint r = 0; r < nr; ++r) {
      const float inv =
          p.norm != 0u && !kNormInX ? 1.0 / sqrt(ClusterSum(ss[r]) / float(p.K) + p.eps) : 1.0;
      for (uint i = 0; i < QR; ++i) {
        const float s = ClusterSum(acc[i][r]) * inv;
#ifdef DUAL
        const float s2 = ClusterSum(acc2[i][r]) * inv;
#else
        const float s2 = 0.0;
#endif
        if (lane == 0u && n + i < p.N) Store(h, r0 + r, n + i, s, s2);
      }
    }
    return;
  }
#endif
  for (uint r = 0; r < RB; ++r) {
    if (r < nr) {  // uniform: every invocation of the workgroup takes the same branch
      for (uint i = 0; i < QR; ++i) {
        const float s = subgroupAdd(acc[i][r]);
        if (subgroupElect()) part[(i * RB + r) * NSG + gl_SubgroupID] = s;
#ifdef DUAL
        const float s2 = subgroupAdd(acc2[i][r]);
        if (subgroupElect()) part2[(i * RB + r) * NSG + gl_SubgroupID] = s2;
#endif
      }
      if (p.norm != 0u) {
        const float q2 = subgroupAdd(ss[r]);
        if (subgroupElect()) part_ss[r * NSG + gl_SubgroupID] = q2;
      }
    }
  }
  barrier();
  if (lane == 0u && n < p.N) {
    const uint per = TPR / gl_SubgroupSize;  // subgroups per output (>= 1, host-checked)
    const uint first = g * per;
    for (uint r = 0; r < nr; ++r) {
      float sq = 0.0;
      if (p.norm != 0u)
        for (uint c = 0; c < per; ++c) sq += part_ss[r * NSG + first + c];
      const float inv = p.norm != 0u && !kNormInX ? 1.0 / sqrt(sq / float(p.K) + p.eps) : 1.0;
      for (uint i = 0; i < QR; ++i) {
        const uint ni = n + i;
        if (ni >= p.N) break;
        float s = 0.0, s2 = 0.0;
        for (uint c = 0; c < per; ++c) s += part[(i * RB + r) * NSG + first + c];
#ifdef DUAL
        for (uint c = 0; c < per; ++c) s2 += part2[(i * RB + r) * NSG + first + c];
#endif
        const float v = Store(h, r0 + r, ni, s * inv, s2 * inv);
#if defined(QOUT)
        qout[r * 32u + g * QR + i] = v;
#endif
      }
    }
  }
#if defined(ROUTE)
  RouteIfLast(r0, nr, rg, inter ? gl_NumWorkGroups.x / nrg : gl_NumWorkGroups.x);
#endif
#if defined(QOUT)
  barrier();
  if (tid < nr) {  // batch row tid's block: outputs [32 x, 32 x + 32) of the workgroup
    vec4 v[8];
    for (uint i = 0u; i < 8u; ++i) {
      const uint o = tid * 32u + 4u * i;
      v[i] = vec4(qout[o], qout[o + 1u], qout[o + 2u], qout[o + 3u]);
    }
    uvec4 q[XB];
    vec2 ds;
    QuantizeBlock32(v, q, ds);
    const uint blk = (r0 + tid) * (p.N / 32u) + ogx;
    for (uint j = 0u; j < XB; ++j) qo4[blk * XB + j] = q[j];
    qds[blk] = ds;
  }
#endif
}
