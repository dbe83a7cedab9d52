// Dot / Axpy against a double-precision reference over odd sizes and misaligned pointers;
// DotRows / AxpyRows bit for bit against Dot / Axpy row by row (MLA's batch invariance needs it).
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

// Every group size 1..9 (whole groups of 4 and each remainder), odd lengths and strides, rows
// starting misaligned: each row's result equals Dot's / Axpy's exactly, and nothing outside the
// rows' n elements is written.
TEST(CpuVec, DotRowsAndAxpyRowsAreDotAndAxpyPerRow) {
  for (int64_t n : {1, 7, 16, 17, 64, 65, 512, 515}) {
    for (int64_t G = 1; G <= 9; ++G) {
      const int64_t ld = n + 3;
      auto a = test::RandomFloats(size_t(G * ld + 1), 7 + uint64_t(n * 10 + G));
      auto b = test::RandomFloats(size_t(n + 1), 300 + uint64_t(n));
      std::vector<float> got(static_cast<size_t>(G), 0.0f);
      cpu::DotRows(a.data() + 1, ld, G, b.data() + 1, n, got.data());
      for (int64_t g = 0; g < G; ++g)
        EXPECT_EQ(got[size_t(g)], cpu::Dot(a.data() + 1 + g * ld, b.data() + 1, n))
            << "n=" << n << " G=" << G << " row " << g;
      std::vector<float> w(static_cast<size_t>(G));
      for (int64_t g = 0; g < G; ++g) w[size_t(g)] = 0.1f * float(g) - 0.3f;
      std::vector<float> y = a, want = a;
      cpu::AxpyRows(w.data(), b.data() + 1, y.data() + 1, ld, G, n);
      for (int64_t g = 0; g < G; ++g)
        cpu::Axpy(w[size_t(g)], b.data() + 1, want.data() + 1 + g * ld, n);
      EXPECT_EQ(y, want) << "n=" << n << " G=" << G;
    }
  }
}

}  // namespace
}  // namespace es
