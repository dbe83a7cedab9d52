#version 450
// Prefill attention on tensor cores (GL_NV_cooperative_matrix2, workgroup scope; built only where
// glslc supports the extension, picked at run time with f16 math on a device that has it): the
// flash-attention recurrence over key tiles, each product a cooperative-matrix multiply.
// Same inputs, layout and result as attention_rows.comp (causal, GQA, rows of several slots):
//   q: q[t*q_rs + h*q_hs + i]; key j of slot s: columns kvh*dk.. of cache row KvRow(s, j) of KA
//   (width a_w), value j: columns kvh*dv.. of row KvRow(s, j) of V (width v_w) — read through the
//   block tables (kv_addr.glsl), so a slot's blocks may lie anywhere in the pool; caches of any
//   KV type (kv_type.glsl: f32, f16, q8_0, q4_0), dequantized by the tile loads
//   out[t*o_rs + h*o_hs + d] = Σ_{j <= pos_t} softmax_j(scale * q_t·key_j) value_j[d]
// A workgroup takes BR query rows t0.. of head h (group grid: Hq x ceil(T / BR)). It holds
// Q = scale * q (BR x DK, f16), and per row the running maximum M, the running sum L (both
// smeared across BR x BC accumulators) and the output O (BR x DV, f32). Per tile of BC keys: where
// the tile's 16-key cache blocks follow each other in memory (f32 / f16 caches: a slot's fresh
// blocks, the unpaged layout), the matrices load straight from the cache through clamping tensor
// layouts; else the keys and values are staged in shared memory as f16, key by key through the
// block table (zeros past the head dims and past the slot's last key). Then:
//   S = Q Kᵀ (f32); masked entries -> -inf; M' = max(M, rowmax S); P = exp(S - M') (f16);
//   L = exp(M - M') L + rowsum P (P times a BC x BC matrix of ones); O = exp(M - M') O + P V
// and at the end out = O / L. M starts at -FLT_MAX/2, not -inf, so a row with every key of a tile
// masked gets P = exp(-inf) = 0 and exp(M - M') = 1 (no NaN). The q loads and the output stores go
// through clamping tensor layouts: head dims pad to DK / DV (multiples of 16) with zeros, rows
// past the workgroup's last (T, or its tile's end) are computed but not stored.
// Rows of one tile may belong to different sequences (slots): the group makes one pass over the
// keys per distinct slot, rows of other slots masked out of it; within a pass only tiles that
// reach past the smallest context of the slot's rows (the causal diagonal) need the mask.
// With tiles_off (mixed steps), workgroup y takes tile y of the batch buffer's table instead: at
// most BR consecutive rows of one sequence (the decode rows take attention_decode.comp).
// Specialization constants: 0 workgroup size, 1 BR, 2 BC, 3 DK, 4 DV (host: Coopmat2Config).
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BR = 64;
layout(constant_id = 2) const uint BC = 64;
layout(constant_id = 3) const uint DK = 128;
layout(constant_id = 4) const uint DV = 128;

layout(binding = 0) readonly buffer Q { float q[]; };
layout(binding = 1) readonly buffer KA { uint ka[]; };
layout(binding = 2) readonly buffer KB { uint kb[]; };  // unused (MLA's rope part)
layout(binding = 3) readonly buffer V { uint v[]; };
#if defined(KV_F16) || defined(KV_F32)
#define DIRECT 1  // tiles of adjacent blocks load straight from the cache (KAE, VE: aliases)
#if defined(KV_F16)
#define KV_T float16_t
#else
#define KV_T float
#endif
layout(binding = 1) readonly buffer KAE { KV_T kae[]; };
layout(binding = 3) readonly buffer VE { KV_T ve[]; };
#endif
#if defined(KV_F16)
layout(binding = 1) readonly buffer KA8 { uvec4 ka8[]; };  // 8 halves a load (staging)
layout(binding = 3) readonly buffer V8 { uvec4 v8[]; };
#endif
layout(binding = 4) writeonly buffer O { float o[]; };
layout(binding = 5) readonly buffer B { int bt[]; };
#include "kv_addr.glsl"
#include "kv_type.glsl"
layout(push_constant) uniform P {
  uint Hq, Hkv, wa, wb, dv, q_rs, q_hs, capacity, a_w, b_w, v_w, slot_off, pos_off, o_rs, o_hs;
  float scale;
  uint T;
  uint tiles_off;  // mixed steps: bt[tiles_off] tiles, (first row, rows) pairs after it; 0: none
} p;
KV_LOADS(ka, KaAt, KaAt2, KaAt4)
KV_LOADS(v, VAt, VAt2, VAt4)

shared int row_slot[BR];   // -1 past the workgroup's rows
shared uint row_ctx[BR];   // keys the row sees: its position + 1
// The tile's keys [BC][DK] and values [BC][DV] as f16; rows padded by 8 halves (16 bytes: the
// loads' alignment) against bank conflicts.
const uint KS = DK + 8u, VS = DV + 8u;
shared float16_t sk[BC * KS];
shared float16_t sv[BC * VS];

#define CLAMP gl_CooperativeMatrixClampModeConstantNV
#define ACC(R, C) coopmat<float, gl_ScopeWorkgroup, R, C, gl_MatrixUseAccumulator>

const float kNegInf = -1.0 / 0.0;

// S entries of keys the row does not see (another slot's row, or past its position) -> -inf.
float MaskScore(const in uint32_t row, const in uint32_t col, const in float s, const in uint32_t j0,
                const in int slot) {
  return row_slot[row] == slot && j0 + col < row_ctx[row] ? s : kNegInf;
}
float Exp(const in uint32_t row, const in uint32_t col, const in float x) { return exp(x); }
float Max2(const in uint32_t row, const in uint32_t col, const in float a, const in float b) {
  return max(a, b);
}
float MaxOf(const in float a, const in float b) { return max(a, b); }
float First(const in float a, const in float b) { return a; }
float Recip(const in uint32_t row, const in uint32_t col, const in float x) {
  return x == 0.0 ? 0.0 : 1.0 / x;
}

// Four elements c.. of a head (n = elements the head has from c on; 0: none) of cache row R.
vec4 KeyAt(const uint R, const uint col, const uint n, const bool by4) {
  if (n >= 4u && by4) return KaAt4(R, col, p.a_w);
  vec4 x = vec4(0.0);
  for (uint c = 0; c < 4u; ++c)
    if (c < n) x[c] = KaAt(R, col + c, p.a_w);
  return x;
}
vec4 ValueAt(const uint R, const uint col, const uint n, const bool by4) {
  if (n >= 4u && by4) return VAt4(R, col, p.v_w);
  vec4 x = vec4(0.0);
  for (uint c = 0; c < 4u; ++c)
    if (c < n) x[c] = VAt(R, col + c, p.v_w);
  return x;
}

// Stages keys j0 .. j0 + BC - 1 of the slot whose block table starts at bt[table] (n_ctx keys).
void StageTile(const uint table, const uint j0, const uint n_ctx, const uint kvh) {
#if defined(KV_F16)
  // 8 halves (16 bytes) a load where every head start is 8-aligned
  if (p.wa % 8u == 0u && p.dv % 8u == 0u && p.a_w % 8u == 0u && p.v_w % 8u == 0u) {
    const uint nk8 = DK / 8u, nv8 = DV / 8u;
    for (uint e = gl_LocalInvocationID.x; e < BC * nk8; e += gl_WorkGroupSize.x) {
      const uint jj = e / nk8, c = 8u * (e % nk8), j = j0 + jj;
      uvec4 w = uvec4(0u);
      if (j < n_ctx && c < p.wa) {
        const uint R = uint(bt[table + j / kKvBlockTokens]) * kKvBlockTokens + j % kKvBlockTokens;
        w = ka8[(R * p.a_w + kvh * p.wa + c) / 8u];
      }
      const uint o = jj * KS + c;
      [[unroll]] for (uint i = 0; i < 4u; ++i) {
        const vec2 h2 = unpackHalf2x16(w[i]);
        sk[o + 2u * i] = float16_t(h2.x), sk[o + 2u * i + 1u] = float16_t(h2.y);
      }
    }
    for (uint e = gl_LocalInvocationID.x; e < BC * nv8; e += gl_WorkGroupSize.x) {
      const uint jj = e / nv8, c = 8u * (e % nv8), j = j0 + jj;
      uvec4 w = uvec4(0u);
      if (j < n_ctx && c < p.dv) {
        const uint R = uint(bt[table + j / kKvBlockTokens]) * kKvBlockTokens + j % kKvBlockTokens;
        w = v8[(R * p.v_w + kvh * p.dv + c) / 8u];
      }
      const uint o = jj * VS + c;
      [[unroll]] for (uint i = 0; i < 4u; ++i) {
        const vec2 h2 = unpackHalf2x16(w[i]);
        sv[o + 2u * i] = float16_t(h2.x), sv[o + 2u * i + 1u] = float16_t(h2.y);
      }
    }
    return;
  }
#endif
  const uint nk4 = DK / 4u, nv4 = DV / 4u;
  // 4-element loads need 4-aligned head starts (and, quantized, stay within a 32-block then)
  const bool k4 = p.wa % 4u == 0u, v4 = p.dv % 4u == 0u;
  for (uint e = gl_LocalInvocationID.x; e < BC * nk4; e += gl_WorkGroupSize.x) {
    const uint jj = e / nk4, c = 4u * (e % nk4), j = j0 + jj;
    vec4 x = vec4(0.0);
    if (j < n_ctx && c < p.wa) {
      const uint R = uint(bt[table + j / kKvBlockTokens]) * kKvBlockTokens + j % kKvBlockTokens;
      x = KeyAt(R, kvh * p.wa + c, p.wa - c, k4);
    }
    const uint o = jj * KS + c;
    sk[o] = float16_t(x.x), sk[o + 1u] = float16_t(x.y), sk[o + 2u] = float16_t(x.z),
    sk[o + 3u] = float16_t(x.w);
  }
  for (uint e = gl_LocalInvocationID.x; e < BC * nv4; e += gl_WorkGroupSize.x) {
    const uint jj = e / nv4, c = 4u * (e % nv4), j = j0 + jj;
    vec4 x = vec4(0.0);
    if (j < n_ctx && c < p.dv) {
      const uint R = uint(bt[table + j / kKvBlockTokens]) * kKvBlockTokens + j % kKvBlockTokens;
      x = ValueAt(R, kvh * p.dv + c, p.dv - c, v4);
    }
    const uint o = jj * VS + c;
    sv[o] = float16_t(x.x), sv[o + 1u] = float16_t(x.y), sv[o + 2u] = float16_t(x.z),
    sv[o + 3u] = float16_t(x.w);
  }
}

void main() {
  const uint h = gl_WorkGroupID.x;
  uint t0 = gl_WorkGroupID.y * BR, tend = min(p.T, t0 + BR);
  if (p.tiles_off != 0u) {  // uniform: the whole workgroup leaves or stays
    const uint y = gl_WorkGroupID.y;
    if (y >= uint(bt[p.tiles_off])) return;
    t0 = uint(bt[p.tiles_off + 1u + 2u * y]);
    tend = min(p.T, t0 + uint(bt[p.tiles_off + 2u + 2u * y]));
  }
  const uint kvh = h / (p.Hq / p.Hkv);
  for (uint r = gl_LocalInvocationID.x; r < BR; r += gl_WorkGroupSize.x) {
    const bool live = t0 + r < tend;
    row_slot[r] = live ? bt[p.slot_off + t0 + r] : -1;
    row_ctx[r] = live ? uint(bt[p.pos_off + t0 + r]) + 1u : 0u;
  }
  barrier();

  tensorLayoutNV<2, CLAMP> tq = createTensorLayoutNV(2, CLAMP);
  tq = setTensorLayoutDimensionNV(tq, tend, p.wa);
  tq = setTensorLayoutStrideNV(tq, p.q_rs, 1);
  ACC(BR, DK) q32;
  coopMatLoadTensorNV(q32, q, h * p.q_hs, sliceTensorLayoutNV(tq, t0, BR, 0, DK));
  q32 *= p.scale;
  const coopmat<float16_t, gl_ScopeWorkgroup, BR, DK, gl_MatrixUseA> qa =
      coopmat<float16_t, gl_ScopeWorkgroup, BR, DK, gl_MatrixUseA>(q32);

  ACC(BR, BC) M = ACC(BR, BC)(uintBitsToFloat(0xFEFFFFFFu));  // -FLT_MAX / 2
  ACC(BR, BC) L = ACC(BR, BC)(0.0);
  ACC(BR, DV) Ov = ACC(BR, DV)(0.0);
  const uint rows = tend - t0;
  const coopmat<float16_t, gl_ScopeWorkgroup, BC, BC, gl_MatrixUseB> ones =
      coopmat<float16_t, gl_ScopeWorkgroup, BC, BC, gl_MatrixUseB>(1.0);
  for (uint pass = 0; pass < rows; ++pass) {
    // One pass per distinct slot among the live rows (uniform: shared values only).
    const int slot = row_slot[pass];
    bool seen = false;
    for (uint e = 0; e < pass && !seen; ++e) seen = row_slot[e] == slot;
    if (seen) continue;
    uint n_ctx = 0, min_ctx = 0xFFFFFFFFu;
    bool others = false;
    for (uint e = 0; e < rows; ++e) {
      if (row_slot[e] == slot) {
        n_ctx = max(n_ctx, row_ctx[e]);
        min_ctx = min(min_ctx, row_ctx[e]);
      } else {
        others = true;
      }
    }
    const uint table = uint(bt[0]) + uint(slot) * uint(bt[1]);  // kv_addr.glsl's layout
#if defined(DIRECT)
    tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
#endif
    [[dont_unroll]] for (uint j0 = 0; j0 < n_ctx; j0 += BC) {
      coopmat<float16_t, gl_ScopeWorkgroup, DK, BC, gl_MatrixUseB> kt;
      coopmat<float16_t, gl_ScopeWorkgroup, BC, DV, gl_MatrixUseB> vt;
      bool adjacent = false;
#if defined(DIRECT)
      // The tile's first cache row, and whether its blocks holding keys follow each other (uniform).
      const uint R0 = uint(bt[table + j0 / kKvBlockTokens]) * kKvBlockTokens;
      adjacent = true;
      for (uint b = 1u; b < BC / kKvBlockTokens && j0 + b * kKvBlockTokens < n_ctx; ++b)
        adjacent = adjacent &&
                   uint(bt[table + j0 / kKvBlockTokens + b]) * kKvBlockTokens == R0 + b * kKvBlockTokens;
      if (adjacent) {
        // Rows past the slot's last key read zeros (their scores are masked).
        tensorLayoutNV<2, CLAMP> tk = createTensorLayoutNV(2, CLAMP);
        tk = setTensorLayoutDimensionNV(tk, n_ctx - j0, p.wa);
        tk = setTensorLayoutStrideNV(tk, p.a_w, 1);
        tensorLayoutNV<2, CLAMP> tv = createTensorLayoutNV(2, CLAMP);
        tv = setTensorLayoutDimensionNV(tv, n_ctx - j0, p.dv);
        tv = setTensorLayoutStrideNV(tv, p.v_w, 1);
#if defined(KV_F16)
        coopMatLoadTensorNV(kt, kae, R0 * p.a_w + kvh * p.wa, sliceTensorLayoutNV(tk, 0, BC, 0, DK), transposed);
        coopMatLoadTensorNV(vt, ve, R0 * p.v_w + kvh * p.dv, sliceTensorLayoutNV(tv, 0, BC, 0, DV));
#else
        coopmat<float, gl_ScopeWorkgroup, DK, BC, gl_MatrixUseB> kt32;
        coopMatLoadTensorNV(kt32, kae, R0 * p.a_w + kvh * p.wa, sliceTensorLayoutNV(tk, 0, BC, 0, DK), transposed);
        kt = coopmat<float16_t, gl_ScopeWorkgroup, DK, BC, gl_MatrixUseB>(kt32);
        coopmat<float, gl_ScopeWorkgroup, BC, DV, gl_MatrixUseB> vt32;
        coopMatLoadTensorNV(vt32, ve, R0 * p.v_w + kvh * p.dv, sliceTensorLayoutNV(tv, 0, BC, 0, DV));
        vt = coopmat<float16_t, gl_ScopeWorkgroup, BC, DV, gl_MatrixUseB>(vt32);
#endif
      }
#endif
      if (!adjacent) {
        barrier();  // the previous staged tile's loads from sk / sv are done
        StageTile(table, j0, n_ctx, kvh);
        barrier();
        coopMatLoad(kt, sk, 0, KS, gl_CooperativeMatrixLayoutColumnMajor);
        coopMatLoad(vt, sv, 0, VS, gl_CooperativeMatrixLayoutRowMajor);
      }
      ACC(BR, BC) S = ACC(BR, BC)(0.0);
      S = coopMatMulAdd(qa, kt, S);
      if (others || j0 + BC > min_ctx) coopMatPerElementNV(S, S, MaskScore, j0, slot);

      ACC(BR, BC) rowmax, Mold = M, Pf, eM;
      coopMatReduceNV(rowmax, S, gl_CooperativeMatrixReduceRowNV, MaxOf);
      coopMatPerElementNV(M, rowmax, Max2, Mold);
      coopMatPerElementNV(Pf, S - M, Exp);
      coopMatPerElementNV(eM, Mold - M, Exp);
      const coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA> pa =
          coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA>(Pf);
      ACC(BR, BC) rowsum = ACC(BR, BC)(0.0);
      rowsum = coopMatMulAdd(pa, ones, rowsum);
      L = eM * L + rowsum;

      // exp(M - M') smeared across each row of the BR x DV output.
      ACC(BR, DV) eMd;
      coopMatReduceNV(eMd, eM, gl_CooperativeMatrixReduceRowNV, First);
      Ov = Ov * eMd;
      Ov = coopMatMulAdd(pa, vt, Ov);
    }
  }

  ACC(BR, DV) inv;
  coopMatReduceNV(inv, L, gl_CooperativeMatrixReduceRowNV, First);
  coopMatPerElementNV(inv, inv, Recip);
  Ov = Ov * inv;
  tensorLayoutNV<2, CLAMP> to = createTensorLayoutNV(2, CLAMP);
  to = setTensorLayoutDimensionNV(to, tend, p.dv);
  to = setTensorLayoutStrideNV(to, p.o_rs, 1);
  coopMatStoreTensorNV(Ov, o, h * p.o_hs, sliceTensorLayoutNV(to, t0, BR, 0, DV));
}
