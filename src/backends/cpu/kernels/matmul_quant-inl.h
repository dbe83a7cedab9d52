// SIMD bodies of the block-quantized CPU matmul (f32 activations quantized per block to int8,
// integer dot products), compiled per target by matmul.cpp. Not yet implemented: no quantized
// weight type is supported, MatMul reports them as unsupported.

#ifndef ES_CPU_KERNELS_MATMUL_QUANT_ONCE_
#define ES_CPU_KERNELS_MATMUL_QUANT_ONCE_
#include "edgeseek/core/dtype.h"
namespace es::cpu {
inline bool QuantMatMulSupports(DType) { return false; }
}  // namespace es::cpu
#endif

#if defined(ES_CPU_KERNELS_MATMUL_QUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ES_CPU_KERNELS_MATMUL_QUANT_INL_H_
#undef ES_CPU_KERNELS_MATMUL_QUANT_INL_H_
#else
#define ES_CPU_KERNELS_MATMUL_QUANT_INL_H_
#endif

#include "edgeseek/core/error.h"
#include "edgeseek/core/thread_pool.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace es::cpu {
namespace HWY_NAMESPACE {

inline void QuantMatMul(const float*, int64_t, int64_t, const void*, DType wtype, int64_t,
                        const float*, float*, int64_t, ThreadPool&) {
  Fail("MatMul: weight type ", Name(wtype), " is not supported by the CPU kernels");
}

}  // namespace HWY_NAMESPACE
}  // namespace es::cpu
HWY_AFTER_NAMESPACE();

#endif  // ES_CPU_KERNELS_MATMUL_QUANT_INL_H_ toggle
