// The random cases shared by the CPU matmul kernel tests (cpu_matmul_test.cpp,
// cpu_matmul_quant_test.cpp, cpu_matmul_arm_test.cpp, cpu_matmul_targets_test.cpp,
// cpu_repack_test.cpp): the quantized weight types, random weights with their exact dequantized
// values, and the f64 reference with the error bound of the kernels' activation quantization
// (matmul_quant-inl.h's header comment) and f32 accumulation.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "edgeseek/internal/core/dtype.h"

namespace es::test {

// Every block-quantized weight type the CPU matmul takes.
inline constexpr DType kQuantMatMulTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                                              DType::kQ5_0, DType::kQ5_1, DType::kI4G,
                                              DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

struct TestWeights {
  std::vector<uint8_t> bytes;  // N rows of RowBytes(type, K)
  std::vector<float> values;   // [N, K]: es::Dequantize of the bytes
};

// N rows of K uniform values in [-1, 1) (RandomFloats(N · K, seed)) encoded as `type` (any type
// es::Quantize takes, F32, F16 and BF16 too; K a multiple of its block).
TestWeights RandomWeights(DType type, int64_t N, int64_t K, uint64_t seed);

// The levels of the kernels' activation quantization for weights of `type`: 32512 (int16) for
// Q8_0, 127 (int8) otherwise.
double ActivationLevels(DType type);
// The act_levels of kernels that take the activations as they are (F32, F16, BF16 weights): the
// bound below is then f32 accumulation alone.
inline constexpr double kExactActivations = std::numeric_limits<double>::infinity();

// y = x · Wᵀ (+ bias) in f64 (x [R, K], w [N, K], y [R, N]), summed in k order from the bias, and
// for each output the worst-case error of quantizing x per block of 32 with `act_levels` levels
// (|x − x̂| <= d/2, d = block absmax / act_levels): Σ_b d_b/2 · Σ_{k in b} |w_k|, plus f32
// rounding, (1e-6 · √K + f32_slack) · (Σ_k |x_k · w_k| + |bias|). (f32 accumulation in vector
// lanes errs like √K · 2^-24 relative to Σ|x w| on random data: 1e-6 · √K is a margin of ~10 over
// that, and still catches any wrong index or lost term.) A last partial block of K is allowed.
void QuantMatMulReference(const std::vector<float>& x, int64_t R, int64_t K,
                          const std::vector<float>& w, int64_t N, const float* bias,
                          double act_levels, std::vector<double>* y, std::vector<double>* bound,
                          double f32_slack = 1e-7);

}  // namespace es::test
