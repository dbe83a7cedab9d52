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
// Tile sizes are specialization constants (Coopmat2Config, device.cpp; ES_VK_CM2_TILE / _WG),
// the workgroup size too, and so are the variant flags (constant 4). The host sets FAST and LOOP
// 1 (device.cpp kCm2Flags: the A/B that settled them is in docs/vulkan.md); the other bits are no
// longer set by any host path (their knobs were deleted with the tuning registry) and are kept
// only until the H200 can check the shader without them:
//   bit 0 FAST:  a workgroup whose tile lies wholly inside x, W and K runs its K loop on layouts
//               without clamping, with 16-byte strides and offsets;
//   bit 1 ALIGN: explicit 16-byte row strides on the clamping layouts too;
//   bits 2-3 LOOP: the K loop with a don't-unroll hint (0), no hint (1, the driver may unroll /
//               software-pipeline it) or an unroll hint (2);
//   bit 4 ACC16: f16 accumulators (half the registers of f32 ones), converted to f32 before the
//               bias and the store;
//   bit 5 ORDER: consecutive workgroups walk the activation tiles of one weight tile (instead of
//               the weight tiles of one activation tile).
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
layout(constant_id = 4) const uint FLAGS = 0;
const bool FAST = (FLAGS & 1u) != 0u;
const bool ALIGN = (FLAGS & 2u) != 0u;
const uint LOOP = (FLAGS >> 2u) & 3u;
const bool ACC16 = (FLAGS & 16u) != 0u;
const bool ORDER = (FLAGS & 32u) != 0u;

#if defined(W_Q4_0) || defined(W_Q8_0)
// Block-quantized weights (the "_q4_0" / "_q8_0" variants, always SWAP and X_F16), decoded in the
// tile loads (cooperativeMatrixBlockLoads): W is seen as uvec4 units of wload.glsl's repacked rows
// (Q4_0: one unit = a block's 32 quants; Q8_0: half a block's), a row of QRowWords(K) / 4 units,
// so the tensor layout's blocks are 32 (Q4_0) or 16 (Q8_0) elements of one row and the driver
// hands DecodeW a reference to the unit; the block's f16 scale is read through WS, the same
// chunk bound again as words. No f16 copy of the weight is made.
#extension GL_EXT_buffer_reference : require
layout(binding = 0) readonly buffer W { uvec4 w[]; };
layout(binding = 5) readonly buffer WS { uint ws[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer DecW { uvec4 q; };
#define QDEC 1
#else
layout(binding = 0) readonly buffer W { float16_t w[]; };
#endif
#ifdef X_F16
layout(binding = 1) readonly buffer X { float16_t x[]; };
#else
layout(binding = 1) readonly buffer X { float x[]; };
#endif
layout(binding = 2) readonly buffer Bias { float bias[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };
#ifdef SPLITK
// SPLITK (the "_sk" variants): gl_NumWorkGroups.z slices of K, each workgroup's partial tile
// into part (a scratch of [slices][R][N] f32), summed by matmul_gemm_cm2_reduce.comp.
layout(binding = 4) writeonly buffer Part { float part[]; };
#endif
#ifdef QDEC
// R: x's rows, a whole number of BM tiles (the host pads x's f16 copy with zero rows, so that every
// tile takes the unclamped loop); Ry: the rows of y.
layout(push_constant) uniform P { uint K, N, R, n0, y_rs, has_bias, Ry; } p;
#define Y_ROWS p.Ry
#else
layout(push_constant) uniform P { uint K, N, R, n0, y_rs, has_bias; } p;
#define Y_ROWS p.R
#endif

#ifdef QDEC
#define WCOLS p.K
#define WORD(i) ws[i]
#include "wload.glsl"
#if defined(W_Q4_0)
const uint QBS = 32u;  // elements a tensor-layout block (one uvec4 unit)
// Element j of the block: byte j % 16 of the unit, its low nibble for j < 16, else its high one.
float16_t DecodeW(const in DecW bl, const in uint bc[2], const in uint cib[2]) {
  const uint j = cib[1];
  const uint v = (bl.q[(j & 15u) >> 2u] >> (8u * (j & 3u) + 4u * (j >> 4u))) & 15u;
  return float16_t((float(v) - 8.0) * QScale(bc[0] * QRowWords(p.K), p.K, bc[1]));
}
#else
const uint QBS = 16u;  // half a Q8_0 block: 16 int8 quants
float16_t DecodeW(const in DecW bl, const in uint bc[2], const in uint cib[2]) {
  const uint j = cib[1];
  const int v = int(bl.q[j >> 2u] << (24u - 8u * (j & 3u))) >> 24;
  return float16_t(float(v) * QScale(bc[0] * QRowWords(p.K), p.K, bc[1] >> 1u));
}
#endif
// The weight layout's blocks and row stride in units (set on every layout W is read through).
#define W_LAYOUT(t)                                  \
  t = setTensorLayoutBlockSizeNV(t, 1, QBS);         \
  t = setTensorLayoutStrideNV(t, QRowWords(p.K) / 4u, 1);
#define W_DECODE , DecodeW
#else
#define W_DECODE
#endif


// LOAD_X(a, t, USE, R0, C0, KK, V): the BM x BK tile of x at (m0, KK) into `a` (a coopmat of
// R0 x C0 f16 with use USE) through layout t, as is (V = AS_IS) or transposed (V = TRANSPOSED).
#define AS_IS
#define TRANSPOSED , transposed
#ifdef X_F16
#define LOAD_X(a, t, USE, R0, C0, KK, V) coopMatLoadTensorNV(a, x, 0, sliceTensorLayoutNV(t, m0, BM, KK, BK) V);
#else
#define LOAD_X(a, t, USE, R0, C0, KK, V)                                          \
  {                                                                               \
    coopmat<float, gl_ScopeWorkgroup, R0, C0, USE> a32;                           \
    coopMatLoadTensorNV(a32, x, 0, sliceTensorLayoutNV(t, m0, BM, KK, BK) V);     \
    a = coopmat<float16_t, gl_ScopeWorkgroup, R0, C0, USE>(a32);                  \
  }
#endif

// STEP(acc, LX, LW, KK): acc += the product of the K slice at KK, x through layout LX and W
// through LW. The accumulator is AR x AC.
#ifndef SWAP
#define AR BM
#define AC BN
#define STEP(acc, LX, LW, KK)                                                               \
  {                                                                                         \
    coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> a;                         \
    LOAD_X(a, LX, gl_MatrixUseA, BM, BK, KK, AS_IS)                                         \
    coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> b;                         \
    coopMatLoadTensorNV(b, w, 0, sliceTensorLayoutNV(LW, c0, BN, KK, BK), transposed);      \
    acc = coopMatMulAdd(a, b, acc);                                                         \
  }
#else
// SWAP: yᵀ = W xᵀ — the weight tile is the A operand as it lies in memory, x the transposed B.
#define AR BN
#define AC BM
#define STEP(acc, LX, LW, KK)                                                               \
  {                                                                                         \
    coopmat<float16_t, gl_ScopeWorkgroup, BN, BK, gl_MatrixUseA> a;                         \
    coopMatLoadTensorNV(a, w, 0, sliceTensorLayoutNV(LW, c0, BN, KK, BK) W_DECODE);         \
    coopmat<float16_t, gl_ScopeWorkgroup, BK, BM, gl_MatrixUseB> b;                         \
    LOAD_X(b, LX, gl_MatrixUseB, BK, BM, KK, TRANSPOSED)                                    \
    acc = coopMatMulAdd(a, b, acc);                                                         \
  }
#endif

// KLOOP: the K loop over STEP with the loop-control hint LOOP picks (a specialization constant,
// so the driver keeps one of the three).
#define KLOOP(acc, LX, LW, KK)                                                              \
  if (LOOP == 1u) {                                                                         \
    for (uint k = kbeg; k < kend; k += BK) STEP(acc, LX, LW, KK)                            \
  } else if (LOOP == 2u) {                                                                  \
    [[unroll]] for (uint k = kbeg; k < kend; k += BK) STEP(acc, LX, LW, KK)                 \
  } else {                                                                                  \
    [[dont_unroll]] for (uint k = kbeg; k < kend; k += BK) STEP(acc, LX, LW, KK)            \
  }

float AddBias(const in uint32_t row, const in uint32_t col, const in float v, const in uint32_t base,
              const in uint32_t last) {
  return v + bias[min(base + col, last)];
}

float AddBiasT(const in uint32_t row, const in uint32_t col, const in float v, const in uint32_t base,
               const in uint32_t last) {
  return v + bias[min(base + row, last)];
}

#define GEMM_FN GemmAcc32
#define ACC_T float
#include "matmul_gemm_cm2_body.glsl"
#undef GEMM_FN
#undef ACC_T
#define GEMM_FN GemmAcc16
#define ACC_T float16_t
#define ACC_F16
#include "matmul_gemm_cm2_body.glsl"
#undef GEMM_FN
#undef ACC_T
#undef ACC_F16

void main() {
  // Tile (weight tile wt, activation tile at): the group grid is (N / BN, R / BM); ORDER maps the
  // launch order (x fastest) to activation tiles fastest.
  uint wt = gl_WorkGroupID.x, at = gl_WorkGroupID.y;
  if (ORDER) {
    const uint id = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    at = id % gl_NumWorkGroups.y;
    wt = id / gl_NumWorkGroups.y;
  }
  const uint m0 = at * BM;  // first activation row of the tile
  const uint c0 = wt * BN;  // first weight row (output column) of the tile
  if (ACC16)
    GemmAcc16(m0, c0);
  else
    GemmAcc32(m0, c0);
}
