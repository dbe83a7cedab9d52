// The subgroup cooperative-matrix types and operations of either extension, for the tensor-core
// GEMMs (matmul_gemm_cm.comp, matmul_gemm_dec.comp): GL_NV_cooperative_matrix, or with KHR defined
// GL_KHR_cooperative_matrix (the "_khr" variants). Before including, define CM, CN, CK as
// constants (after the include is fine: the macros expand where used).
#ifdef KHR
#extension GL_KHR_cooperative_matrix : require
#define CM_ACC coopmat<float, gl_ScopeSubgroup, CM, CN, gl_MatrixUseAccumulator>
#define CM_A coopmat<float16_t, gl_ScopeSubgroup, CM, CK, gl_MatrixUseA>
#define CM_B coopmat<float16_t, gl_ScopeSubgroup, CK, CN, gl_MatrixUseB>
#define CM_LOAD(m, buf, off, stride, colmajor) \
  coopMatLoad(m, buf, off, stride, (colmajor) ? gl_CooperativeMatrixLayoutColumnMajor : gl_CooperativeMatrixLayoutRowMajor)
#define CM_STORE(m, buf, off, stride) coopMatStore(m, buf, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define CM_MULADD coopMatMulAdd
#else
#extension GL_NV_cooperative_matrix : require
#define CM_ACC fcoopmatNV<32, gl_ScopeSubgroup, CM, CN>
#define CM_A fcoopmatNV<16, gl_ScopeSubgroup, CM, CK>
#define CM_B fcoopmatNV<16, gl_ScopeSubgroup, CK, CN>
#define CM_LOAD(m, buf, off, stride, colmajor) coopMatLoadNV(m, buf, off, stride, colmajor)
#define CM_STORE(m, buf, off, stride) coopMatStoreNV(m, buf, off, stride, false)
#define CM_MULADD coopMatMulAddNV
#endif
#extension GL_KHR_memory_scope_semantics : require
