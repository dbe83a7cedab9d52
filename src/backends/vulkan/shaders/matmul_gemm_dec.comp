#version 450
// Decode-shaped matrix product on subgroup tensor cores (batched decode and the decode rows of
// continuous batching: 9-64 rows; ops/matmul.cpp UseDecGemm):
//   y[r, n0 + n] = Σ_k x[r, k] W[n, k] (+ bias[n0 + n])
//   x: [Rp, K] f16 (to_f16.comp's copy, rows padded with zeros to whole BM tiles), read as uvec4
//   of 8 halves; W: [N, K] Q4_0 or Q8_0 (K % 32 == 0), Q4_K, Q5_K or Q6_K (K % 256 == 0) in
//   wload.glsl's repacked rows, dequantized to f16 in the tile loads (the K-quants: a step is one
//   64-element chunk of a super-block, two groups of 32 with their own scales, as wload.glsl's
//   QSlice reads them); y: f32, row stride y_rs.
// Why not matmul_gemm_cm.comp: with a handful of rows, each workgroup's K loop is bound by the
// latency of one step's loads, and a 32-wide step of 128 weight rows keeps only 2.3 KB of weights
// in flight while its x tile (f32, 64 rows) is larger than the weights. Here a step is BK = 64
// wide (2 blocks of each of 128 weight rows: 4.6 KB in flight a workgroup, and a small enough
// shared stage for several workgroups a multiprocessor: steps of 128 were slower), x
// is f16 and only BM = 16, 32 or 64 rows, and K is split into slices (ks) so that the workgroups
// fill the GPU.
// Workgroup of 256 invocations = 8 subgroups of 32 (host-checked); output tile BM x BN = BM x 128,
// each subgroup owning all BM rows of 16 columns as (BM / CM) x (16 / CN) f32 accumulators.
// One shared stage (at most 192 x 72 halves, 27 KiB: within lavapipe's 32 KiB too): while the subgroups multiply it, the next step's loads are in flight in registers;
// they are dequantized into it between two barriers.
// SCALAR (no cooperative matrices): the same loads, tiles and epilogue with f32 multiply-adds, one
// output per invocation per 256 of the tile; for devices without coopmat only where forced
// (ES_VK_DEC_GEMM=1), which is how lavapipe tests the loaders, the slices and the epilogue.
// Split-K: push constant ks > 0 gives gl_WorkGroupID.z the K slice [z ks, (z + 1) ks) (a
// multiple of BK) and writes its partial tile, without bias, to part[z][r][n] (R x N each);
// matmul_gemm_cm2_reduce.comp sums the slices (+ bias) into y.
#ifndef SCALAR
#include "coopmat.glsl"
#endif
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
#ifndef BM
#define BM 16
#endif
#ifndef BK
#define BK 64
#endif
const uint CM = 16, CK = 16, BN = 128;
const uint WN = BN / 8u;              // columns per subgroup
const uint FM = BM / CM, FN = WN / CN;
const uint LDS = BK + 8u;             // halves per shared row (staggers the banks; 16-byte rows)
const uint W_H = BN * LDS, X_H = BM * LDS;  // halves: the weight tile, then x's
const uint NBK = BK / 32u;            // weight blocks of a row per step

layout(binding = 0) readonly buffer W { uvec4 wq[]; };
layout(binding = 1) readonly buffer X { uvec4 xh4[]; };
layout(binding = 2) readonly buffer Bias { float bias[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };
layout(binding = 4) writeonly buffer Part { float part[]; };
layout(push_constant) uniform P { uint K, N, R, n0, y_rs, has_bias, ks; } p;
#define WORD(i) wq[(i) >> 2][(i) & 3u]
#define WCOLS p.K
#include "wload.glsl"

#if defined(W_Q4_0)
const uint UPR = NBK;  // weight loads per row and step: each block's 16 quant bytes
#elif defined(W_Q8_0)
const uint UPR = 2u * NBK;  // 16 of each block's 32 int8 a load
#elif defined(W_Q4_K) || defined(W_Q5_K) || defined(W_Q6_K)
// A step is one 64-element chunk c of a super-block, two loads a row: load h holds elements
// 16h.. of the chunk (group a) and 32 + 16h.. (group b). Q4_K / Q5_K: group a is the low nibbles
// of the chunk's quant bytes 16h.. (sub-block 2c), b their high nibbles (2c + 1). Q6_K: chunk c
// is half hf = c / 2 of the super-block, quarter pair 2 (c % 2) and 2 (c % 2) + 1 of it (elements
// 32 k + l of the half take ql byte l (k even) or 32 + l (k odd) of the half's 64, the low nibble
// for k < 2, and bits 2k of qh byte l of its 32): group a reads ql bytes 16h.., b 32 + 16h...
#define KQ 1
const uint UPR = 2u;
#if BK != 64
#error "the K-quant variants take 64-wide steps (one chunk of a super-block)"
#endif
#else
#error "define W_Q4_0, W_Q8_0, W_Q4_K, W_Q5_K or W_Q6_K"
#endif
const uint UW = BN * UPR / 256u;  // weight loads per invocation per step
const uint XU = BM * BK / 8u;              // x's uvec4 per step
const uint UX = (XU + 255u) / 256u;        // per invocation (the last one partial)

#ifdef SB
shared ShH { float16_t h[W_H + X_H]; } shh;
shared ShV { uvec4 v[(W_H + X_H) / 8u]; } shv;
shared ShF { float f[8u * CM * CN]; } shf;  // epilogue staging (aliases the tiles: used after)
#define SH shh.h
#define STAGE_F shf.f
#else
shared float16_t sh_h[W_H + X_H];
#ifndef SCALAR
shared float stage_f[8u * CM * CN];
#endif
#define SH sh_h
#define STAGE_F stage_f
#endif

// Eight halves at half-offset o (a multiple of 8) of the tiles.
void Put8(uint o, f16vec4 lo, f16vec4 hi) {
#ifdef SB
  shv.v[o / 8u] = uvec4(packFloat2x16(lo.xy), packFloat2x16(lo.zw), packFloat2x16(hi.xy),
                        packFloat2x16(hi.zw));
#else
  SH[o] = lo.x; SH[o + 1u] = lo.y; SH[o + 2u] = lo.z; SH[o + 3u] = lo.w;
  SH[o + 4u] = hi.x; SH[o + 5u] = hi.y; SH[o + 6u] = hi.z; SH[o + 7u] = hi.w;
#endif
}
void PutQ(uint o, uvec4 q) {
#ifdef SB
  shv.v[o / 8u] = q;
#else
  Put8(o, f16vec4(unpackFloat2x16(q.x), unpackFloat2x16(q.y)),
       f16vec4(unpackFloat2x16(q.z), unpackFloat2x16(q.w)));
#endif
}

// Element t < 16 of a Q4_0 block: the low nibble of byte t; t + 16: its high nibble.
#define NIB4(w, s) (vec4(float(((w) >> (s)) & 15u), float(((w) >> ((s) + 8u)) & 15u),  \
                         float(((w) >> ((s) + 16u)) & 15u), float(((w) >> ((s) + 24u)) & 15u)) - 8.0)
#define SB8(w, s) float(int((w) << (24u - (s))) >> 24)
#define Q8x4(w) vec4(SB8(w, 0u), SB8(w, 8u), SB8(w, 16u), SB8(w, 24u))

uvec4 rq[UW];
#ifdef KQ
vec4 rs[UW];  // (d * sc, dmin * mn) of the low-nibble sub-block, then of the high one
#if defined(W_Q5_K) || defined(W_Q6_K)
// The high bits, shifted down: Q5_K bit 0 of each byte for group a, bit 1 for b; Q6_K bits 0-1
// for a, 2-3 for b.
uvec4 rh[UW];
#endif
#ifdef W_Q6_K
uvec4 rq2[UW];  // group b's ql bytes (group a's are rq)
const float KQ_BIAS = 32.0;
#else
const float KQ_BIAS = 0.0;
#endif
#else
float rd[UW];
#endif
uvec4 rx[UX];

// Global -> registers for the step starting at k0 (zeros past kend and past N; x's padded rows
// are zeros in memory). Weight load u: row u / (NBK HALVES), block and half of it the rest, so
// neighbouring invocations read neighbouring 16 bytes of one row.
void LoadStep(uint nb, uint m0, uint k0, uint kend) {
  [[unroll]] for (uint l = 0; l < UW; ++l) {
    const uint u = gl_LocalInvocationID.x + 256u * l;
    const uint row = u / UPR, bh = u % UPR, gn = nb + row;
    const uint base = gn * QRowWords(p.K);
#ifdef KQ
    const bool ok = gn < p.N && k0 < kend;
    const uint sb = k0 / 256u, c = (k0 / 64u) & 3u;
#ifdef W_Q6_K
    const uint hf = c >> 1, ka = 2u * (c & 1u);  // group a: quarter ka of half hf
    const uint qo = (base + sb * 32u + hf * 16u) / 4u + bh;
    const uint sh = 4u * (c & 1u);  // the nibble
    rq[l] = ok ? (wq[qo] >> sh) & 0x0F0F0F0Fu : uvec4(0u);
    rq2[l] = ok ? (wq[qo + 2u] >> sh) & 0x0F0F0F0Fu : uvec4(0u);
    rh[l] = ok ? (wq[(base + QHighOff(p.K) + sb * 16u + hf * 8u) / 4u + bh] >> (2u * ka)) &
                     0x0F0F0F0Fu
               : uvec4(0u);
    if (ok) {
      // int8 scales 8 hf + 2 k + h (h: which 16 of the quarter's 32), d per super-block.
      const uint so = base + QMetaOff(p.K) + sb * 4u, ja = 8u * hf + 2u * ka + bh, jb = ja + 2u;
      const float sa = float(int(WORD(so + (ja >> 2)) << (24u - 8u * (ja & 3u))) >> 24);
      const float sbb = float(int(WORD(so + (jb >> 2)) << (24u - 8u * (jb & 3u))) >> 24);
      const float d = unpackHalf2x16(WORD(base + QMetaOff(p.K) + (p.K / 256u) * 4u + (sb >> 1)))[sb & 1u];
      rs[l] = vec4(d * sa, 0.0, d * sbb, 0.0);
    } else {
      rs[l] = vec4(0.0);
    }
#else
    rq[l] = ok ? wq[(base + sb * 32u + c * 8u) / 4u + bh] : uvec4(0u);
#ifdef W_Q5_K
    // qh byte l of the super-block: bit 2c for element l of chunk c, bit 2c + 1 for 32 + l.
    rh[l] = ok ? (wq[(base + QHighOff(p.K) + sb * 8u) / 4u + bh] >> (2u * c)) & 0x03030303u
               : uvec4(0u);
#endif
    if (ok) {
      const uint mo = base + QMetaOff(p.K) + sb * 5u;
      const vec2 dd = unpackHalf2x16(WORD(mo));
      const uint sm = WORD(mo + 1u + c);
      rs[l] = vec4(dd.x * float(sm & 63u), dd.y * float((sm >> 8) & 63u),
                   dd.x * float((sm >> 16) & 63u), dd.y * float((sm >> 24) & 63u));
    } else {
      rs[l] = vec4(0.0);
    }
#endif
#else
    const uint b = k0 / 32u + bh / (UPR / NBK);
    const bool ok = gn < p.N && b * 32u < kend;
    rq[l] = ok ? wq[(base + b * kQWordsPerBlock) / 4u + bh % (UPR / NBK)] : uvec4(0u);
    rd[l] = ok ? QScale(base, p.K, b) : 0.0;
#endif
  }
  const uint K8 = p.K / 8u;
  [[unroll]] for (uint l = 0; l < UX; ++l) {
    const uint u = gl_LocalInvocationID.x + 256u * l;
    const uint row = u / (BK / 8u), c = u % (BK / 8u), gk = k0 + 8u * c;
    rx[l] = u < XU && gk < kend ? xh4[(m0 + row) * K8 + gk / 8u] : uvec4(0u);
  }
}

// Registers -> the shared tiles (f16).
void StoreStep() {
  [[unroll]] for (uint l = 0; l < UW; ++l) {
    const uint u = gl_LocalInvocationID.x + 256u * l;
    const uint row = u / UPR, bh = u % UPR;
    const uvec4 q = rq[l];
#if defined(KQ)
    // Q4_K / Q5_K: (d * sc) * q - dmin * mn; Q6_K: (d * sc) * (q - 32); as wload.glsl's QSlice
    // and the reference.
    const vec4 s = rs[l];
    const uint o = row * LDS + 16u * bh;
    uvec4 lo[4], hi[4];  // the levels of groups a and b, four bytes a word
    [[unroll]] for (uint i = 0; i < 4u; ++i) {
#ifdef W_Q6_K
      lo[i] = QNib(q[i], 0u) | (((uvec4(rh[l][i]) >> uvec4(0u, 8u, 16u, 24u)) & 3u) << 4);
      hi[i] = QNib(rq2[l][i], 0u) | (((uvec4(rh[l][i]) >> uvec4(2u, 10u, 18u, 26u)) & 3u) << 4);
#else
      lo[i] = QNib(q[i], 0u);
      hi[i] = QNib(q[i], 4u);
#ifdef W_Q5_K
      lo[i] |= QBits(rh[l][i], 0u, 4u);
      hi[i] |= QBits(rh[l][i], 1u, 4u);
#endif
#endif
    }
    Put8(o, f16vec4(s.x * QLevels(lo[0], KQ_BIAS) - s.y),
         f16vec4(s.x * QLevels(lo[1], KQ_BIAS) - s.y));
    Put8(o + 8u, f16vec4(s.x * QLevels(lo[2], KQ_BIAS) - s.y),
         f16vec4(s.x * QLevels(lo[3], KQ_BIAS) - s.y));
    Put8(o + 32u, f16vec4(s.z * QLevels(hi[0], KQ_BIAS) - s.w),
         f16vec4(s.z * QLevels(hi[1], KQ_BIAS) - s.w));
    Put8(o + 40u, f16vec4(s.z * QLevels(hi[2], KQ_BIAS) - s.w),
         f16vec4(s.z * QLevels(hi[3], KQ_BIAS) - s.w));
#elif defined(W_Q4_0)
    const float d = rd[l];
    const uint o = row * LDS + 32u * bh;
    Put8(o, f16vec4(d * NIB4(q.x, 0u)), f16vec4(d * NIB4(q.y, 0u)));
    Put8(o + 8u, f16vec4(d * NIB4(q.z, 0u)), f16vec4(d * NIB4(q.w, 0u)));
    Put8(o + 16u, f16vec4(d * NIB4(q.x, 4u)), f16vec4(d * NIB4(q.y, 4u)));
    Put8(o + 24u, f16vec4(d * NIB4(q.z, 4u)), f16vec4(d * NIB4(q.w, 4u)));
#else
    const float d = rd[l];
    const uint o = row * LDS + 16u * bh;  // block bh / 2, half bh % 2
    Put8(o, f16vec4(d * Q8x4(q.x)), f16vec4(d * Q8x4(q.y)));
    Put8(o + 8u, f16vec4(d * Q8x4(q.z)), f16vec4(d * Q8x4(q.w)));
#endif
  }
  [[unroll]] for (uint l = 0; l < UX; ++l) {
    const uint u = gl_LocalInvocationID.x + 256u * l;
    if (u < XU) PutQ(W_H + (u / (BK / 8u)) * LDS + 8u * (u % (BK / 8u)), rx[l]);
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint m0 = gl_WorkGroupID.y * BM, nb = gl_WorkGroupID.x * BN;
  const uint kb = p.ks != 0u ? gl_WorkGroupID.z * p.ks : 0u;
  const uint kend = p.ks != 0u ? min(p.K, kb + p.ks) : p.K;
  const uint steps = (kend - kb + BK - 1u) / BK;
  const bool split = p.ks != 0u;
  const uint part0 = gl_WorkGroupID.z * p.R * p.N;  // this slice's partial [R][N]

#ifdef SCALAR
  const uint PER = BM * BN / 256u;  // outputs per invocation: o = tid + 256 j
  float acc[PER];
  [[unroll]] for (uint j = 0; j < PER; ++j) acc[j] = 0.0;
#else
  const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  CM_ACC acc[FM][FN];
  [[unroll]] for (uint i = 0; i < FM; ++i)
    [[unroll]] for (uint j = 0; j < FN; ++j) acc[i][j] = CM_ACC(0.0);
#endif

  LoadStep(nb, m0, kb, kend);
  StoreStep();
  barrier();
  for (uint s = 0; s < steps; ++s) {
    const bool more = s + 1u < steps;
    if (more) LoadStep(nb, m0, kb + (s + 1u) * BK, kend);
#ifdef SCALAR
    // K outermost: llvmpipe stops any loop after 65,535 iterations in all (its loop limiter),
    // which an inner loop per output would reach within one long K.
    for (uint k = 0; k < BK; ++k) {
      const float wk = float(SH[(tid % BN) * LDS + k]);  // o % BN is the same for every j
      [[unroll]] for (uint j = 0; j < PER; ++j)
        acc[j] += float(SH[W_H + ((tid + 256u * j) / BN) * LDS + k]) * wk;
    }
#else
    [[unroll]] for (uint kk = 0; kk < BK; kk += CK) {
      CM_A a[FM];
      CM_B b[FN];
      [[unroll]] for (uint i = 0; i < FM; ++i)
        CM_LOAD(a[i], SH, W_H + i * CM * LDS + kk, LDS, false);
      // B[k][n] = W[n][k]: W rows are the columns of B (column-major with stride LDS).
      [[unroll]] for (uint j = 0; j < FN; ++j)
        CM_LOAD(b[j], SH, (sg * WN + j * CN) * LDS + kk, LDS, true);
      [[unroll]] for (uint i = 0; i < FM; ++i)
        [[unroll]] for (uint j = 0; j < FN; ++j) acc[i][j] = CM_MULADD(a[i], b[j], acc[i][j]);
    }
#endif
    barrier();
    if (more) {
      StoreStep();
      barrier();
    }
  }

#ifdef SCALAR
  [[unroll]] for (uint j = 0; j < PER; ++j) {
    const uint o = tid + 256u * j, gm = m0 + o / BN, gn = nb + o % BN;
    if (gm >= p.R || gn >= p.N) continue;
    if (split)
      part[part0 + gm * p.N + gn] = acc[j];
    else
      y[gm * p.y_rs + p.n0 + gn] = acc[j] + (p.has_bias != 0u ? bias[p.n0 + gn] : 0.0);
  }
#else
  // Whole tiles without bias go straight to y (16-byte aligned rows); the rest per element.
  const bool direct = split ? m0 + BM <= p.R && nb + BN <= p.N && p.N % 4u == 0u
                            : p.has_bias == 0u && m0 + BM <= p.R && nb + BN <= p.N &&
                                  p.y_rs % 4u == 0u && p.n0 % 4u == 0u;
  [[unroll]] for (uint i = 0; i < FM; ++i) {
    [[unroll]] for (uint j = 0; j < FN; ++j) {
      const uint rb0 = m0 + i * CM, cb0 = nb + sg * WN + j * CN;
      if (direct) {
        if (split)
          CM_STORE(acc[i][j], part, part0 + rb0 * p.N + cb0, p.N);
        else
          CM_STORE(acc[i][j], y, rb0 * p.y_rs + p.n0 + cb0, p.y_rs);
        continue;
      }
      CM_STORE(acc[i][j], STAGE_F, sg * CM * CN, CN);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      for (uint e = lane; e < CM * CN; e += gl_SubgroupSize) {
        const uint gm = rb0 + e / CN, gn = cb0 + e % CN;
        if (gm < p.R && gn < p.N) {
          if (split)
            part[part0 + gm * p.N + gn] = STAGE_F[sg * CM * CN + e];
          else
            y[gm * p.y_rs + p.n0 + gn] =
                STAGE_F[sg * CM * CN + e] + (p.has_bias != 0u ? bias[p.n0 + gn] : 0.0);
        }
      }
      subgroupBarrier();
    }
  }
#endif
}
