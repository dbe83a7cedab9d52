// One workgroup's output tile of matmul_gemm_cm2.comp, included there once per accumulator type:
// GEMM_FN is the function's name, ACC_T the accumulator's component type (ACC_F16 defined when it
// is float16_t). STEP, KLOOP, AR and AC come from the including file.
void GEMM_FN(const uint m0, const uint c0) {
  // K range of this workgroup: all of K, or with SPLITK the slice gl_WorkGroupID.z of
  // gl_NumWorkGroups.z slices of whole BK steps (the layouts end at kend so that clamping stops
  // there; their row stride stays K).
#ifdef SPLITK
  const uint kslice = ((p.K + gl_NumWorkGroups.z - 1u) / gl_NumWorkGroups.z + BK - 1u) / BK * BK;
  const uint kbeg = min(gl_WorkGroupID.z * kslice, p.K), kend = min(kbeg + kslice, p.K);
#else
  const uint kbeg = 0u, kend = p.K;
#endif
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> tx =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  tx = setTensorLayoutDimensionNV(tx, p.R, kend);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> tw =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  tw = setTensorLayoutDimensionNV(tw, p.N, kend);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> ty =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  ty = setTensorLayoutDimensionNV(ty, Y_ROWS, p.n0 + p.N);
  ty = setTensorLayoutStrideNV(ty, p.y_rs, 1);
  // Wᵀ (or xᵀ when SWAP): a tile of K-contiguous rows seen with its two dimensions swapped.
  tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
  // Row strides in halves with the low 3 bits cleared: the host only takes this shader for
  // K % 8 == 0, so this is K itself, but written so the compiler sees 16-byte rows.
  const uint ks = p.K & ~7u;
#ifndef SPLITK
  if (ALIGN) {
#endif
    tx = setTensorLayoutStrideNV(tx, ks, 1);
    tw = setTensorLayoutStrideNV(tw, ks, 1);
#ifndef SPLITK
  }
#endif
#ifdef QDEC
  W_LAYOUT(tw)
#endif

  coopmat<ACC_T, gl_ScopeWorkgroup, AR, AC, gl_MatrixUseAccumulator> acc =
      coopmat<ACC_T, gl_ScopeWorkgroup, AR, AC, gl_MatrixUseAccumulator>(0.0);
  if (FAST && m0 + BM <= p.R && c0 + BN <= p.N && p.K % BK == 0u) {  // (then kend % BK == 0 too)
    // The whole tile lies inside x, W and K: layouts without clamping, 16-byte strides and
    // 16-byte K offsets; one test per workgroup, the K loop itself has no edge.
    tensorLayoutNV<2> ux = createTensorLayoutNV(2);
    ux = setTensorLayoutDimensionNV(ux, p.R, kend);
    ux = setTensorLayoutStrideNV(ux, ks, 1);
    tensorLayoutNV<2> uw = createTensorLayoutNV(2);
    uw = setTensorLayoutDimensionNV(uw, p.N, kend);
    uw = setTensorLayoutStrideNV(uw, ks, 1);
#ifdef QDEC
    W_LAYOUT(uw)
#endif
    KLOOP(acc, ux, uw, (k & ~7u))
  } else {
    KLOOP(acc, tx, tw, k)
  }

#ifdef ACC_F16
  coopmat<float, gl_ScopeWorkgroup, AR, AC, gl_MatrixUseAccumulator> o =
      coopmat<float, gl_ScopeWorkgroup, AR, AC, gl_MatrixUseAccumulator>(acc);
#else
#define o acc
#endif
#if defined(SPLITK)
  // The partial sum of this K slice, into slice z of part ([S][R][N], no bias):
  // matmul_gemm_cm2_reduce.comp adds the slices and the bias into y.
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> tp =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  tp = setTensorLayoutDimensionNV(tp, p.R, p.N);
#ifndef SWAP
  coopMatStoreTensorNV(o, part, gl_WorkGroupID.z * p.R * p.N, sliceTensorLayoutNV(tp, m0, BM, c0, BN));
#else
  coopMatStoreTensorNV(o, part, gl_WorkGroupID.z * p.R * p.N, sliceTensorLayoutNV(tp, m0, BM, c0, BN), transposed);
#endif
#elif !defined(SWAP)
  if (p.has_bias != 0u) coopMatPerElementNV(o, o, AddBias, p.n0 + c0, p.n0 + p.N - 1u);
  coopMatStoreTensorNV(o, y, 0, sliceTensorLayoutNV(ty, m0, BM, p.n0 + c0, BN));
#else
  if (p.has_bias != 0u) coopMatPerElementNV(o, o, AddBiasT, p.n0 + c0, p.n0 + p.N - 1u);
  coopMatStoreTensorNV(o, y, 0, sliceTensorLayoutNV(ty, m0, BM, p.n0 + c0, BN), transposed);
#endif
#ifndef ACC_F16
#undef o
#endif
}
