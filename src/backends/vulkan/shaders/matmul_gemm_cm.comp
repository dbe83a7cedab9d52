#version 450
// Prefill matrix product on tensor cores (GL_NV_cooperative_matrix, or KHR below):
//   y[r, n0 + n] = Σ_k x[r, k] W[n, k] (+ bias[n0 + n])
//   x: [R, K] f32 (converted to f16 on the way to shared memory); W: [N, K] of the weight type
//   (this chunk; f16 as is, bf16 and f32 converted to f16; Q8_0/Q4_0 in wload.glsl's repacked
//   rows, dequantized to f16: one 32-element block per row per K step, K % 32 == 0; the other
//   block types (QGEN: Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) through wload.glsl's QGroup4, 16
//   elements per invocation per K step, exactly as Dequantize rounds them, then to f16); y:
//   f32, row stride y_rs. K % 8 == 0 (host-checked).
// Workgroup of 256 invocations = 8 subgroups of 32 (host-checked subgroup size); output tile of
// BM x BN = (128 or 64, define BM) x 128, subgroups laid out 2 (rows) x 4 (columns), each owning
// BM/2 x 32 of the tile as (BM/2 / CM) x (32 / CN) f32 accumulators of CM x CN (CM = 16, CN = 16
// or 8 by the device's cooperative-matrix shapes, CK = 16). BM = 64 doubles the workgroups of
// prefill-sized products (512 rows x 3584 columns is only 112 tiles of 128 x 128).
// K goes in steps of BK = 32 through two f16 tile stages in shared memory (double buffering:
// one barrier per step): while the subgroups multiply stage s, the next step's global loads are
// in flight in registers, and they are written to stage s ^ 1 after the multiply.
// SB (GL_EXT_shared_memory_block, VK_KHR_workgroup_memory_explicit_layout): the stages are also
// seen as uvec4, so each invocation writes 8 halves per store instead of one (the NV coopmat
// loads read scalar f16 arrays only).
// Epilogue: tiles wholly inside R and N without bias are stored straight to y
// (coopMatStoreNV); others go through a small per-subgroup f32 staging tile so that partial
// tiles at the edges (any size) and the bias are handled per element.
// Split-K (non-MOE): push constant ks > 0 gives each gl_WorkGroupID.z the K slice [z ks,
// (z + 1) ks) (ks a multiple of BK) and writes its partial tile, without bias, to
// part[z][r][n] (row stride N); matmul_gemm_cm2_reduce.comp sums the slices (+ bias) into y.
// Decode-shaped products (9-64 rows) have few output tiles (a 3584-output projection: 28 of
// 128 columns on 132 multiprocessors), and each workgroup's K loop is bound by the latency of
// one step's loads: the slices multiply the workgroups.
// KHR (the "_khr" variants, glslc with GL_KHR_cooperative_matrix): the same kernel on
// VK_KHR_cooperative_matrix's subgroup-scope matrices, for devices without the NV extension (or
// ES_VK_COOPMAT=khr); coopmat.glsl's CM_* macros name the matrix types and operations of either.
#include "coopmat.glsl"
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#ifdef SB
#extension GL_EXT_shared_memory_block : require
#endif
layout(local_size_x = 256) in;
#ifndef CN
#define CN 16
#endif
const uint CM = 16, CK = 16;
#ifndef BM
#define BM 128
#endif
const uint BN = 128, BK = 32;
#ifdef MOE
// The grouped expert product (moe_gemm.glsl): one expert per gl_WorkGroupID.z, rows gathered.
layout(binding = 0) readonly buffer Wb { uvec4 wq[]; } wb[8];
layout(binding = 1) readonly buffer X { vec4 x4[]; };
#include "moe_gemm.glsl"
#define WQ(i) wb[blk].wq[i]
#define XROW(row, gm) MoeXRow(row)
#define XRS4 (p.x_rs / 4u)  // vec4 per x row
#define ROWS moe_count
#define WBASE_EL wbase   // dense types: elements
#define WBASE_Q wbase    // block types: words
#else
layout(binding = 0) readonly buffer W { uvec4 wq[]; };
layout(binding = 1) readonly buffer X { vec4 x4[]; };
layout(binding = 2) readonly buffer Bias { float bias[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };
layout(binding = 4) writeonly buffer Part { float part[]; };
layout(push_constant) uniform P { uint K, N, R, n0, y_rs, has_bias, ks; } p;
#define WQ(i) wq[i]
#define XROW(row, gm) (gm)
#define XRS4 K4
#define ROWS p.R
#define WBASE_EL 0u
#define WBASE_Q 0u
#endif
const uint LDS = BK + 8;          // f16 per shared row: 80 bytes (5 uvec4), staggers the banks
const uint LDQ = LDS / 8u;        // uvec4 per shared row
const uint WM = BM / 2, WN = 32;  // per subgroup
const uint FM = WM / CM, FN = WN / CN;
const uint A_H = BM * LDS, STAGE_H = (BM + BN) * LDS;  // halves: A tile, one stage (A then B)

#if defined(W_Q4_1) || defined(W_Q5_0) || defined(W_Q5_1) || defined(W_Q4_K) || defined(W_Q5_K) || \
    defined(W_Q6_K)
#define QGEN 1
#endif
#if defined(W_Q8_0) || defined(W_Q4_0) || defined(QGEN)
// Repacked quantized rows (wload.glsl): QRowWords, QScale and kQWordsPerBlock.
#define WORD(i) WQ((i) >> 2)[(i) & 3u]
#define WCOLS p.K
#include "wload.glsl"
#endif

// Units of 8 elements (one uvec4 of halves in shared memory) per invocation per K step.
const uint UA = BM * (BK / 8u) / 256u;  // x: 2 vec4 each
#if defined(W_F32)
const uint UB = BN * (BK / 8u) / 256u;  // 2 uvec4 of f32 each
#elif defined(W_F16) || defined(W_BF16)
const uint UB = BN * (BK / 8u) / 256u;  // 1 uvec4 each
#elif defined(W_Q8_0) || defined(W_Q4_0) || defined(QGEN)
// Q8_0: each invocation takes half a row's block (16 quants = 1 uvec4 → 2 units); Q4_0: the
// block's 16 bytes, of which it expands the low (elements 0-15) or high nibbles (16-31).
const uint UB = 1u;
#else
#error "define W_F32, W_F16, W_BF16 or a block type W_Q*"
#endif

#ifdef SB
shared ShH { float16_t h[2u * STAGE_H]; } shh;
shared ShV { uvec4 v[2u * STAGE_H / 8u]; } shv;
shared ShF { float f[8u * CM * CN]; } shf;  // epilogue staging (aliases the stages: used after them)
#define SH shh.h
#define STAGE_F shf.f
#else
shared float16_t sh_h[2u * STAGE_H];
shared float stage_f[8u * CM * CN];
#define SH sh_h
#define STAGE_F stage_f
#endif
#ifdef MOE
#ifdef SB
// The tile's pairs after the stages (the blocks alias each other).
shared ShR { float16_t pad_[2u * STAGE_H]; uint rows[BM]; } shr;
#define MOE_ROWS
#define moe_rows shr.rows
#endif
#define MOE_GEMM_FUNCS
#include "moe_gemm.glsl"
#endif

// Eight halves at half-offset o (a multiple of 8) of the stages.
void Put8(uint o, f16vec4 lo, f16vec4 hi) {
#ifdef SB
  shv.v[o / 8u] = uvec4(packFloat2x16(lo.xy), packFloat2x16(lo.zw), packFloat2x16(hi.xy),
                        packFloat2x16(hi.zw));
#else
  SH[o] = lo.x; SH[o + 1u] = lo.y; SH[o + 2u] = lo.z; SH[o + 3u] = lo.w;
  SH[o + 4u] = hi.x; SH[o + 5u] = hi.y; SH[o + 6u] = hi.z; SH[o + 7u] = hi.w;
#endif
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint wm = sg / 4u, wn = sg % 4u;       // subgroup position in the 2 x 4 layout
  const uint m0 = gl_WorkGroupID.y * BM, nb = gl_WorkGroupID.x * BN;
  const uint K4 = p.K / 4u;
#ifdef MOE
  if (!MoeBegin(m0)) return;
#endif

  CM_ACC acc[FM][FN];
  [[unroll]] for (uint i = 0; i < FM; ++i)
    [[unroll]] for (uint j = 0; j < FN; ++j) acc[i][j] = CM_ACC(0.0);

  // Prefetch registers of one K step.
  vec4 ra[UA][2];
#if defined(W_F32)
  uvec4 rb[UB][2];
#else
  uvec4 rb[UB];
#endif
#if defined(W_Q8_0) || defined(W_Q4_0)
  float rd;
#elif defined(QGEN)
  vec4 rg[4];  // 16 dequantized elements: row tid / 2, elements 16 (tid % 2) .. + 15 of the step
#endif

  // Global -> registers for the K step starting at k0 (zeros outside R, N, K; K % 8 == 0, so a
  // unit of 8 elements is wholly inside or outside K).
  #define LOAD_A(k0)                                                                  \
    [[unroll]] for (uint l = 0; l < UA; ++l) {                                                   \
      const uint u = tid + 256u * l, row = u / (BK / 8u), c = u % (BK / 8u);          \
      const uint gm = m0 + row, gk4 = (k0) / 4u + 2u * c;                             \
      const bool ok = gm < ROWS && gk4 < K4;                                          \
      const uint xr = XROW(row, gm);                                                  \
      ra[l][0] = ok ? x4[xr * XRS4 + gk4] : vec4(0.0);                                \
      ra[l][1] = ok ? x4[xr * XRS4 + gk4 + 1u] : vec4(0.0);                           \
    }
#if defined(W_F32) || defined(W_F16) || defined(W_BF16)
#if defined(W_F32)
  const uint QPU = 2u;  // uvec4 per unit of 8
#else
  const uint QPU = 1u;
#endif
  #define LOAD_B(k0)                                                                  \
    [[unroll]] for (uint l = 0; l < UB; ++l) {                                                   \
      const uint u = tid + 256u * l, row = u / (BK / 8u), c = u % (BK / 8u);          \
      const uint gn = nb + row, gk = (k0) + 8u * c;                                   \
      const bool ok = gn < p.N && gk < p.K;                                           \
      const uint q = (WBASE_EL + gn * p.K + gk) / (8u / QPU);                         \
      LOAD_B_UNIT                                                                     \
    }
#if defined(W_F32)
  #define LOAD_B_UNIT rb[l][0] = ok ? WQ(q) : uvec4(0u); rb[l][1] = ok ? WQ(q + 1u) : uvec4(0u);
#else
  #define LOAD_B_UNIT rb[l] = ok ? WQ(q) : uvec4(0u);
#endif
#elif defined(QGEN)
  // Other block types: invocation tid dequantizes elements k0 + 16 (tid % 2) .. + 15 of row
  // tid / 2 of the tile (four groups of 4, QGroup4; K % 32 == 0 so the step is inside K).
  #define LOAD_B(k0)                                                                  \
    {                                                                                 \
      const uint row = tid / 2u, half_ = tid % 2u, gn = nb + row;                     \
      const uint base = WBASE_Q + gn * QRowWords(p.K);                                          \
      [[unroll]] for (uint j = 0; j < 4u; ++j)                                        \
        rg[j] = gn < p.N ? QGroup4(base, p.K, (k0) + 16u * half_ + 4u * j) : vec4(0.0); \
    }
#else
  // Quantized: invocation tid takes row tid / 2 of the tile, half tid % 2 of its block k0 / 32.
  #define LOAD_B(k0)                                                                  \
    {                                                                                 \
      const uint row = tid / 2u, half_ = tid % 2u, gn = nb + row;                     \
      const uint base = WBASE_Q + gn * QRowWords(p.K), b = (k0) / 32u;                          \
      const bool ok = gn < p.N;                                                       \
      LOAD_Q                                                                          \
      rd = ok ? QScale(base, p.K, b) : 0.0;                                           \
    }
#if defined(W_Q8_0)
  #define LOAD_Q rb[0] = ok ? WQ((base + b * kQWordsPerBlock) / 4u + half_) : uvec4(0u);
#else
  #define LOAD_Q rb[0] = ok ? WQ((base + b * kQWordsPerBlock) / 4u) : uvec4(0u);
#endif
#endif

  // Registers -> stage st (f16).
  #define STORE_A(st)                                                                 \
    [[unroll]] for (uint l = 0; l < UA; ++l) {                                                   \
      const uint u = tid + 256u * l, row = u / (BK / 8u), c = u % (BK / 8u);          \
      Put8((st) * STAGE_H + row * LDS + 8u * c, f16vec4(ra[l][0]), f16vec4(ra[l][1])); \
    }
#if defined(W_F32) || defined(W_F16) || defined(W_BF16)
  #define STORE_B(st)                                                                 \
    [[unroll]] for (uint l = 0; l < UB; ++l) {                                                   \
      const uint u = tid + 256u * l, row = u / (BK / 8u), c = u % (BK / 8u);          \
      const uint o = (st) * STAGE_H + A_H + row * LDS + 8u * c;                       \
      STORE_B_UNIT                                                                    \
    }
#if defined(W_F32)
  #define STORE_B_UNIT Put8(o, f16vec4(uintBitsToFloat(rb[l][0])), f16vec4(uintBitsToFloat(rb[l][1])));
#elif defined(W_F16)
  #define STORE_B_UNIT                                                                \
    Put8(o, f16vec4(unpackFloat2x16(rb[l].x), unpackFloat2x16(rb[l].y)),              \
         f16vec4(unpackFloat2x16(rb[l].z), unpackFloat2x16(rb[l].w)));
#else
  #define BF2(w) vec2(uintBitsToFloat((w) << 16), uintBitsToFloat((w) & 0xffff0000u))
  #define STORE_B_UNIT                                                                \
    Put8(o, f16vec4(BF2(rb[l].x), BF2(rb[l].y)), f16vec4(BF2(rb[l].z), BF2(rb[l].w)));
#endif
#elif defined(QGEN)
  #define STORE_B(st)                                                                 \
    {                                                                                 \
      const uint row = tid / 2u, half_ = tid % 2u;                                    \
      const uint o = (st) * STAGE_H + A_H + row * LDS + 16u * half_;                  \
      Put8(o, f16vec4(rg[0]), f16vec4(rg[1]));                                        \
      Put8(o + 8u, f16vec4(rg[2]), f16vec4(rg[3]));                                   \
    }
#elif defined(W_Q8_0)
  // Elements 16 half_ + t: signed byte t of rb[0] (x = d * q).
  #define SB8(w, s) float(int((w) << (24u - (s))) >> 24)
  #define Q8x4(w) vec4(SB8(w, 0u), SB8(w, 8u), SB8(w, 16u), SB8(w, 24u))
  #define STORE_B(st)                                                                 \
    {                                                                                 \
      const uint row = tid / 2u, half_ = tid % 2u;                                    \
      const uint o = (st) * STAGE_H + A_H + row * LDS + 16u * half_;                  \
      Put8(o, f16vec4(rd * Q8x4(rb[0].x)), f16vec4(rd * Q8x4(rb[0].y)));              \
      Put8(o + 8u, f16vec4(rd * Q8x4(rb[0].z)), f16vec4(rd * Q8x4(rb[0].w)));         \
    }
#else
  // Element t < 16: low nibble of byte t; t + 16: its high nibble (x = d * (nibble - 8)).
  #define NIB4(w, s) (vec4(float(((w) >> (s)) & 15u), float(((w) >> ((s) + 8u)) & 15u),  \
                           float(((w) >> ((s) + 16u)) & 15u), float(((w) >> ((s) + 24u)) & 15u)) - 8.0)
  #define STORE_B(st)                                                                 \
    {                                                                                 \
      const uint row = tid / 2u, half_ = tid % 2u, sh = 4u * half_;                   \
      const uint o = (st) * STAGE_H + A_H + row * LDS + 16u * half_;                  \
      Put8(o, f16vec4(rd * NIB4(rb[0].x, sh)), f16vec4(rd * NIB4(rb[0].y, sh)));      \
      Put8(o + 8u, f16vec4(rd * NIB4(rb[0].z, sh)), f16vec4(rd * NIB4(rb[0].w, sh))); \
    }
#endif

#ifdef MOE
  const uint kb = 0u, kend = p.K;
#else
  const uint kb = p.ks != 0u ? gl_WorkGroupID.z * p.ks : 0u;
  const uint kend = p.ks != 0u ? min(p.K, kb + p.ks) : p.K;
#endif
  const uint steps = (kend - kb + BK - 1u) / BK;
  LOAD_A(kb)
  LOAD_B(kb)
  STORE_A(0u)
  STORE_B(0u)
  barrier();
  for (uint s = 0; s < steps; ++s) {
    const uint cur = s & 1u;
    const bool more = s + 1u < steps;
    if (more) {
      LOAD_A(kb + (s + 1u) * BK)
      LOAD_B(kb + (s + 1u) * BK)
    }
    const uint ab = cur * STAGE_H, bb = ab + A_H;
    [[unroll]] for (uint kk = 0; kk < BK; kk += CK) {
      CM_A a[FM];
      CM_B b[FN];
      [[unroll]] for (uint i = 0; i < FM; ++i)
        CM_LOAD(a[i], SH, ab + (wm * WM + i * CM) * LDS + kk, LDS, false);
      // B[k][n] = W[n][k]: W rows are the columns of B (column-major with stride LDS).
      [[unroll]] for (uint j = 0; j < FN; ++j)
        CM_LOAD(b[j], SH, bb + (wn * WN + j * CN) * LDS + kk, LDS, true);
      [[unroll]] for (uint i = 0; i < FM; ++i)
        [[unroll]] for (uint j = 0; j < FN; ++j) acc[i][j] = CM_MULADD(a[i], b[j], acc[i][j]);
    }
    if (more) {
      STORE_A(cur ^ 1u)
      STORE_B(cur ^ 1u)
    }
    barrier();
  }

  // Whole tiles without bias go straight to y (16-byte aligned rows); the rest per element.
#ifdef MOE
  const bool direct = false;  // rows scattered to their pairs
#else
  const bool split = p.ks != 0u;
  const uint part0 = gl_WorkGroupID.z * p.R * p.N;  // this slice's partial [R][N]
  const bool direct = split ? m0 + BM <= p.R && nb + BN <= p.N && p.N % 4u == 0u
                            : p.has_bias == 0u && m0 + BM <= p.R && nb + BN <= p.N &&
                                  p.y_rs % 4u == 0u && p.n0 % 4u == 0u;
#endif
  [[unroll]] for (uint i = 0; i < FM; ++i) {
    [[unroll]] for (uint j = 0; j < FN; ++j) {
      const uint rb0 = m0 + wm * WM + i * CM, cb0 = nb + wn * WN + j * CN;
#ifndef MOE
      if (direct) {
        if (split)
          CM_STORE(acc[i][j], part, part0 + rb0 * p.N + cb0, p.N);
        else
          CM_STORE(acc[i][j], y, rb0 * p.y_rs + p.n0 + cb0, p.y_rs);
        continue;
      }
#endif
      CM_STORE(acc[i][j], STAGE_F, sg * CM * CN, CN);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      for (uint e = lane; e < CM * CN; e += gl_SubgroupSize) {
        const uint gm = rb0 + e / CN, gn = cb0 + e % CN;
#ifdef MOE
        if (gm < ROWS && gn < p.N)
          y[MoeYRow(gm - m0) * p.y_rs + gn] = STAGE_F[sg * CM * CN + e] * MoeScale(gm - m0);
#else
        if (gm < p.R && gn < p.N) {
          if (split)
            part[part0 + gm * p.N + gn] = STAGE_F[sg * CM * CN + e];
          else
            y[gm * p.y_rs + p.n0 + gn] =
                STAGE_F[sg * CM * CN + e] + (p.has_bias != 0u ? bias[p.n0 + gn] : 0.0);
        }
#endif
      }
      subgroupBarrier();
    }
  }
}
