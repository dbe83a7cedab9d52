#include "matmul_case_util.h"

#include <algorithm>
#include <cmath>

#include "edgeseek/internal/quant/blocks.h"
#include "test_util.h"

namespace es::test {

TestWeights RandomWeights(DType type, int64_t N, int64_t K, uint64_t seed) {
  TestWeights w;
  const auto src = RandomFloats(size_t(N * K), seed, 1.0f);
  w.bytes.resize(RowBytes(type, K) * size_t(N));
  w.values.resize(src.size());
  Quantize(type, src.data(), w.bytes.data(), N * K);
  Dequantize(type, w.bytes.data(), w.values.data(), N * K);
  return w;
}

double ActivationLevels(DType type) {
  if (type == DType::kI4F) return kExactActivations;  // f32 activations (matmul_i4f-inl.h)
  return type == DType::kQ8_0 ? 32512.0 : 127.0;
}

void QuantMatMulReference(const std::vector<float>& x, int64_t R, int64_t K,
                          const std::vector<float>& w, int64_t N, const float* bias,
                          double act_levels, std::vector<double>* y, std::vector<double>* bound,
                          double f32_slack) {
  y->assign(size_t(R * N), 0.0);
  bound->assign(size_t(R * N), 0.0);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t n = 0; n < N; ++n) {
      double s = bias ? bias[n] : 0.0, b = 0.0, mag = bias ? std::fabs(bias[n]) : 0.0;
      for (int64_t k0 = 0; k0 < K; k0 += kQK) {
        double amax = 0.0, wabs = 0.0;
        for (int64_t k = k0; k < std::min(k0 + kQK, K); ++k) {
          const double xv = x[size_t(r * K + k)], wv = w[size_t(n * K + k)];
          s += xv * wv;
          mag += std::fabs(xv * wv);
          amax = std::max(amax, std::fabs(xv));
          wabs += std::fabs(wv);
        }
        b += amax / act_levels / 2.0 * wabs;
      }
      (*y)[size_t(r * N + n)] = s;
      (*bound)[size_t(r * N + n)] = b * 1.0001 + (1e-6 * std::sqrt(double(K)) + f32_slack) * mag;
    }
  }
}

}  // namespace es::test
