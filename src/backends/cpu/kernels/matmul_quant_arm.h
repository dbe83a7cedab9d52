// ARM64 integer paths of the block-quantized CPU matmul (matmul_quant_arm.cpp): plain NEON
// (widening multiplies), dotprod (SDOT, ARMv8.2+) and i8mm (SMMLA, 2 activation rows × 2 weight
// columns per instruction, for R > 1), chosen at run time from the CPU's hwcaps so that one
// binary runs on every ARMv8 CPU. All three give bit-identical outputs, in GEMV and GEMM alike
// (the reduction order is in matmul_quant_arm.cpp's header comment).
//
// The path is the best the CPU has, lowered by the environment variable
//   ES_CPU_ARM_PATH=neon|dotprod|i8mm      (read once; a path the CPU lacks is clamped down)
// so that tests and comparisons can force each one. Off aarch64 every path is kNone and
// ArmQuantMatMul must not be called.
#pragma once

#include <cstdint>

#include "edgeseek/internal/core/dtype.h"
#include "edgeseek/internal/core/thread_pool.h"

namespace es::cpu {

enum class ArmQuantPath : int { kNone = 0, kNeon = 1, kDotprod = 2, kI8mm = 3 };

// The best path this CPU supports (kNone off aarch64).
ArmQuantPath ArmQuantPathBest();
// The path MatMul takes: ArmQuantPathBest() lowered by ES_CPU_ARM_PATH.
ArmQuantPath ArmQuantPathActive();
// "NEON", "NEON+dotprod", "NEON+dotprod+i8mm" ("none" for kNone).
const char* ArmQuantPathName(ArmQuantPath path);

// Whether the ARM paths handle weights of this type (all of QuantMatMulSupports on aarch64).
bool ArmQuantMatMulSupports(DType wtype);

// y = x · Wᵀ (+ bias) on `path` (kNeon <= path <= ArmQuantPathBest()), arguments as MatMul
// (matmul.h), already checked by it.
void ArmQuantMatMul(ArmQuantPath path, const float* x, int64_t R, int64_t K, const void* w,
                    DType wtype, int64_t N, const float* bias, float* y, int64_t ldy,
                    ThreadPool& pool);

}  // namespace es::cpu
