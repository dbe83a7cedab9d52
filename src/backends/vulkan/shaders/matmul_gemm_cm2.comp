#version 450
// Prefill matrix product with workgroup-scope cooperative matrices (GL_NV_cooperative_matrix2,
// NVIDIA tensor cores; built only where glslc supports the extension, picked at run time where
// the device has VK_NV_cooperative_matrix2 with workgroup scope and tensor addressing):
//   y[r, n0 + n] = Σ_k x[r, k] W[n, k] (+ bias[n0 + n])
//   x: [R, K] f16 (X_F16: converted once per product by to_f16.comp, so that the driver stages
//   2-byte tiles) or f32 (rounded to f16 after each tile's load); W: [N, K] f16 (this chunk);
//   y: f32, row stride y_rs. Accumulation in f32.
// The whole output tile BM (activation rows) x BN (weight rows) is one workgroup-scope
// accumulator; each K step loads a BM x BK tile of x and a BK x BN tile of Wᵀ through tensor
// layouts (the driver stages them through shared memory and schedules the tensor-core
// instructions). Tensor layouts clamp: loads outside R, N or K read zeros and stores outside
// R x N are dropped, so any R, N and K (K % 8 == 0 for 16-byte rows) need no edge code.
// Tile sizes are specialization constants (knob ES_VK_CM2_TILE, device.cpp), the workgroup
// size too.
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 32;

layout(binding = 0) readonly buffer W { float16_t w[]; };
#ifdef X_F16
layout(binding = 1) readonly buffer X { float16_t x[]; };
#else
layout(binding = 1) readonly buffer X { float x[]; };
#endif
layout(binding = 2) readonly buffer Bias { float bias[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint K, N, R, n0, y_rs, has_bias; } p;


// LOAD_X(a, t, USE, R0, C0, V): the BM x BK tile of x at (m0, k) into `a` (a coopmat of R0 x C0
// f16 with use USE) through layout t, as is (V = AS_IS) or transposed (V = TRANSPOSED).
#define AS_IS
#define TRANSPOSED , transposed
#ifdef X_F16
#define LOAD_X(a, t, USE, R0, C0, V) coopMatLoadTensorNV(a, x, 0, sliceTensorLayoutNV(t, m0, BM, k, BK) V);
#else
#define LOAD_X(a, t, USE, R0, C0, V)                                              \
  {                                                                               \
    coopmat<float, gl_ScopeWorkgroup, R0, C0, USE> a32;                           \
    coopMatLoadTensorNV(a32, x, 0, sliceTensorLayoutNV(t, m0, BM, k, BK) V);      \
    a = coopmat<float16_t, gl_ScopeWorkgroup, R0, C0, USE>(a32);                  \
  }
#endif

float AddBias(const in uint32_t row, const in uint32_t col, const in float v, const in uint32_t base,
              const in uint32_t last) {
  return v + bias[min(base + col, last)];
}

float AddBiasT(const in uint32_t row, const in uint32_t col, const in float v, const in uint32_t base,
               const in uint32_t last) {
  return v + bias[min(base + row, last)];
}

void main() {
  const uint m0 = gl_WorkGroupID.y * BM;  // first activation row of the tile
  const uint c0 = gl_WorkGroupID.x * BN;  // first weight row (output column) of the tile

  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> tx =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  tx = setTensorLayoutDimensionNV(tx, p.R, p.K);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> tw =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  tw = setTensorLayoutDimensionNV(tw, p.N, p.K);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> ty =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  ty = setTensorLayoutDimensionNV(ty, p.R, p.n0 + p.N);
  ty = setTensorLayoutStrideNV(ty, p.y_rs, 1);
  // Wᵀ: the weight tile is BN rows of K-contiguous elements; the view swaps the two dimensions.
  tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);

#ifndef SWAP
  coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
      coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
  [[dont_unroll]] for (uint k = 0; k < p.K; k += BK) {
    coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> a;
    LOAD_X(a, tx, gl_MatrixUseA, BM, BK, AS_IS)
    coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> b;
    coopMatLoadTensorNV(b, w, 0, sliceTensorLayoutNV(tw, c0, BN, k, BK), transposed);
    acc = coopMatMulAdd(a, b, acc);
  }
  if (p.has_bias != 0u) coopMatPerElementNV(acc, acc, AddBias, p.n0 + c0, p.n0 + p.N - 1u);
  coopMatStoreTensorNV(acc, y, 0, sliceTensorLayoutNV(ty, m0, BM, p.n0 + c0, BN));
#else
  // SWAP: yᵀ = W xᵀ — the weight tile is the A operand as it lies in memory, x the transposed B.
  coopmat<float, gl_ScopeWorkgroup, BN, BM, gl_MatrixUseAccumulator> acc =
      coopmat<float, gl_ScopeWorkgroup, BN, BM, gl_MatrixUseAccumulator>(0.0);
  [[dont_unroll]] for (uint k = 0; k < p.K; k += BK) {
    coopmat<float16_t, gl_ScopeWorkgroup, BN, BK, gl_MatrixUseA> a;
    coopMatLoadTensorNV(a, w, 0, sliceTensorLayoutNV(tw, c0, BN, k, BK));
    coopmat<float16_t, gl_ScopeWorkgroup, BK, BM, gl_MatrixUseB> b;
    LOAD_X(b, tx, gl_MatrixUseB, BK, BM, TRANSPOSED)
    acc = coopMatMulAdd(a, b, acc);
  }
  if (p.has_bias != 0u) coopMatPerElementNV(acc, acc, AddBiasT, p.n0 + c0, p.n0 + p.N - 1u);
  coopMatStoreTensorNV(acc, y, 0, sliceTensorLayoutNV(ty, m0, BM, p.n0 + c0, BN), transposed);
#endif
}
