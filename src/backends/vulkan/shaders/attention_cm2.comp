#version 450
// Prefill attention on tensor cores (GL_NV_cooperative_matrix2, workgroup scope; built only where
// glslc supports the extension, picked at run time with f16 math on a device that has it): the
// flash-attention recurrence over key tiles, each product a cooperative-matrix multiply.
// Same inputs, layout and result as attention_rows.comp (causal, GQA, rows of several slots):
//   q: q[t*q_rs + h*q_hs + i]; key j of slot s = KA[(KvRow(s, 0) + j)*a_w + kvh*dk ..],
//   value j = V[(KvRow(s, 0) + j)*v_w + kvh*dv ..]: keys of a slot adjacent (kv_addr.glsl; the
//   host uses this kernel only while no slot left its own contiguous blocks); caches f16
//   (KV_F16) or f32
//   out[t*o_rs + h*o_hs + d] = Σ_{j <= pos_t} softmax_j(scale * q_t·key_j) value_j[d]
// A workgroup takes BR query rows t0.. of head h (group grid: Hq x ceil(T / BR)). It holds
// Q = scale * q (BR x DK, f16), and per row the running maximum M, the running sum L (both
// smeared across BR x BC accumulators) and the output O (BR x DV, f32). Per tile of BC keys:
//   S = Q Kᵀ (f32); masked entries -> -inf; M' = max(M, rowmax S); P = exp(S - M') (f16);
//   L = exp(M - M') L + rowsum P (P times a BC x BC matrix of ones); O = exp(M - M') O + P V
// and at the end out = O / L. M starts at -FLT_MAX/2, not -inf, so a row with every key of a tile
// masked gets P = exp(-inf) = 0 and exp(M - M') = 1 (no NaN). Loads go through clamping tensor
// layouts: head dims pad to DK / DV (multiples of 16) with zeros, keys past the slot's last one
// read zeros (their scores are masked), rows past T are computed but not stored.
// Rows of one tile may belong to different sequences (slots): the group makes one pass over the
// keys per distinct slot, rows of other slots masked out of it; within a pass only tiles that
// reach past the smallest context of the slot's rows (the causal diagonal) need the mask.
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
#if defined(KV_F16)
#define KV_T float16_t
#else
#define KV_T float
#endif
layout(binding = 1) readonly buffer KA { KV_T ka[]; };
layout(binding = 2) readonly buffer KB { uint kb[]; };  // unused (MLA's rope part)
layout(binding = 3) readonly buffer V { KV_T v[]; };
layout(binding = 4) writeonly buffer O { float o[]; };
layout(binding = 5) readonly buffer B { int bt[]; };
#include "kv_addr.glsl"
layout(push_constant) uniform P {
  uint Hq, Hkv, wa, wb, dv, q_rs, q_hs, capacity, a_w, b_w, v_w, slot_off, pos_off, o_rs, o_hs;
  float scale;
  uint T;
} p;

shared int row_slot[BR];   // -1 past T
shared uint row_ctx[BR];   // keys the row sees: its position + 1

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

void main() {
  const uint h = gl_WorkGroupID.x, t0 = gl_WorkGroupID.y * BR;
  const uint kvh = h / (p.Hq / p.Hkv);
  for (uint r = gl_LocalInvocationID.x; r < BR; r += gl_WorkGroupSize.x) {
    const bool live = t0 + r < p.T;
    row_slot[r] = live ? bt[p.slot_off + t0 + r] : -1;
    row_ctx[r] = live ? uint(bt[p.pos_off + t0 + r]) + 1u : 0u;
  }
  barrier();

  tensorLayoutNV<2, CLAMP> tq = createTensorLayoutNV(2, CLAMP);
  tq = setTensorLayoutDimensionNV(tq, p.T, p.wa);
  tq = setTensorLayoutStrideNV(tq, p.q_rs, 1);
  ACC(BR, DK) q32;
  coopMatLoadTensorNV(q32, q, h * p.q_hs, sliceTensorLayoutNV(tq, t0, BR, 0, DK));
  q32 *= p.scale;
  const coopmat<float16_t, gl_ScopeWorkgroup, BR, DK, gl_MatrixUseA> qa =
      coopmat<float16_t, gl_ScopeWorkgroup, BR, DK, gl_MatrixUseA>(q32);

  ACC(BR, BC) M = ACC(BR, BC)(uintBitsToFloat(0xFEFFFFFFu));  // -FLT_MAX / 2
  ACC(BR, BC) L = ACC(BR, BC)(0.0);
  ACC(BR, DV) Ov = ACC(BR, DV)(0.0);
  const uint rows = min(BR, p.T - t0);
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
    // The row of the slot's first key: the host picks this kernel only while every slot still
    // has its own contiguous blocks (VkKv::scattered), so the keys follow it in memory.
    const uint base = KvRow(uint(slot), 0u);
    tensorLayoutNV<2, CLAMP> tk = createTensorLayoutNV(2, CLAMP);
    tk = setTensorLayoutDimensionNV(tk, n_ctx, p.wa);
    tk = setTensorLayoutStrideNV(tk, p.a_w, 1);
    tensorLayoutNV<2, CLAMP> tv = createTensorLayoutNV(2, CLAMP);
    tv = setTensorLayoutDimensionNV(tv, n_ctx, p.dv);
    tv = setTensorLayoutStrideNV(tv, p.v_w, 1);
    tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
    const uint k_off = base * p.a_w + kvh * p.wa, v_off = base * p.v_w + kvh * p.dv;
    const coopmat<float16_t, gl_ScopeWorkgroup, BC, BC, gl_MatrixUseB> ones =
        coopmat<float16_t, gl_ScopeWorkgroup, BC, BC, gl_MatrixUseB>(1.0);
    [[dont_unroll]] for (uint j0 = 0; j0 < n_ctx; j0 += BC) {
      coopmat<float16_t, gl_ScopeWorkgroup, DK, BC, gl_MatrixUseB> kt;
#if defined(KV_F16)
      coopMatLoadTensorNV(kt, ka, k_off, sliceTensorLayoutNV(tk, j0, BC, 0, DK), transposed);
#else
      coopmat<float, gl_ScopeWorkgroup, DK, BC, gl_MatrixUseB> kt32;
      coopMatLoadTensorNV(kt32, ka, k_off, sliceTensorLayoutNV(tk, j0, BC, 0, DK), transposed);
      kt = coopmat<float16_t, gl_ScopeWorkgroup, DK, BC, gl_MatrixUseB>(kt32);
#endif
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

      coopmat<float16_t, gl_ScopeWorkgroup, BC, DV, gl_MatrixUseB> vt;
#if defined(KV_F16)
      coopMatLoadTensorNV(vt, v, v_off, sliceTensorLayoutNV(tv, j0, BC, 0, DV));
#else
      coopmat<float, gl_ScopeWorkgroup, BC, DV, gl_MatrixUseB> vt32;
      coopMatLoadTensorNV(vt32, v, v_off, sliceTensorLayoutNV(tv, j0, BC, 0, DV));
      vt = coopmat<float16_t, gl_ScopeWorkgroup, BC, DV, gl_MatrixUseB>(vt32);
#endif
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
  to = setTensorLayoutDimensionNV(to, p.T, p.dv);
  to = setTensorLayoutStrideNV(to, p.o_rs, 1);
  coopMatStoreTensorNV(Ov, o, h * p.o_hs, sliceTensorLayoutNV(to, t0, BR, 0, DV));
}
