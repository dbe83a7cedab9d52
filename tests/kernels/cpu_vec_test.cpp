// Dot / Axpy against a double-precision reference over odd sizes and misaligned pointers.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/cpu/kernels/vec.h"
#include "test_util.h"

namespace es {
namespace {

TEST(CpuVec, DotAndAxpyOddSizes) {
  for (int64_t n : {0, 1, 3, 7, 8, 15, 16, 17, 63, 64, 65, 129, 512, 1000}) {
    auto a = test::RandomFloats(size_t(n + 1), 1 + uint64_t(n));
    auto b = test::RandomFloats(size_t(n + 1), 100 + uint64_t(n));
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      ref += double(a[size_t(i + 1)]) * b[size_t(i + 1)];
      mag += std::fabs(double(a[size_t(i + 1)]) * b[size_t(i + 1)]);
    }
    // +1: misaligned pointers. Tolerance: f32 accumulation, 1e-6·sqrt(n) of Σ|a·b|.
    const float got = cpu::Dot(a.data() + 1, b.data() + 1, n);
    EXPECT_NEAR(got, ref, 1e-6 * std::sqrt(double(n) + 1) * mag + 1e-30) << "n=" << n;
    std::vector<float> y = b;
    cpu::Axpy(0.37f, a.data() + 1, y.data() + 1, n);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(y[size_t(i + 1)], b[size_t(i + 1)] + 0.37 * a[size_t(i + 1)], 1e-6) << "n=" << n;
    EXPECT_EQ(y[0], b[0]);  // untouched before the range
  }
}

}  // namespace
}  // namespace es
