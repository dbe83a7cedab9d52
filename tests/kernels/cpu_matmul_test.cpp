// Tests of the CPU matmul kernels (src/backends/cpu/kernels) for dense weights: accuracy against a
// plain double-precision reference over odd shapes, bias, ldy > N, misaligned pointers, thread
// counts, bad arguments, and the batch-invariance contract of matmul.h (each row of a GEMM is
// bit-identical to the R = 1 call on that row, whatever the other rows hold).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/kernels/matmul.h"
#include "edgeseek/internal/core/error.h"
#include "matmul_case_util.h"
#include "test_util.h"

namespace es {
namespace {

using test::RandomFloats;
using test::RandomWeights;

// The error bound of f32 accumulation in vector lanes, relative to Σ|x w| (matmul_case_util.h).
double Tolerance(int64_t K) { return 1e-6 * std::sqrt(double(K)) + 1e-7; }

// y = x · Wᵀ (+ bias) in f64 and each output's error bound: f32 accumulation, no activation
// quantization (the dense kernels take the activations as they are).
void Reference(const std::vector<float>& x, int64_t R, int64_t K, const std::vector<float>& w,
               int64_t N, const float* bias, std::vector<double>* y, std::vector<double>* bound) {
  test::QuantMatMulReference(x, R, K, w, N, bias, test::kExactActivations, y, bound);
}

const DType kDenseTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

struct Shape {
  int64_t R, K, N;
};

class DenseMatMul : public ::testing::TestWithParam<DType> {};

TEST_P(DenseMatMul, MatchesDoubleReferenceOverOddShapes) {
  const DType type = GetParam();
  ThreadPool pool(2);
  const Shape shapes[] = {{1, 1, 1},     {1, 7, 3},     {1, 129, 17},  {2, 31, 5},
                          {3, 64, 100},  {5, 1000, 17}, {17, 257, 33}, {64, 513, 49},
                          {70, 300, 29}, {1, 1536, 40}, {9, 2049, 7}};
  for (const Shape& s : shapes) {
    for (bool with_bias : {false, true}) {
      const auto w = RandomWeights(type, s.N, s.K, 100 + uint64_t(s.K));
      const auto x = RandomFloats(size_t(s.R * s.K), 7 + uint64_t(s.R), 1.0f);
      const auto bias = RandomFloats(size_t(s.N), 3, 0.5f);
      const float* b = with_bias ? bias.data() : nullptr;
      std::vector<double> ref, bound;
      Reference(x, s.R, s.K, w.values, s.N, b, &ref, &bound);
      std::vector<float> y(size_t(s.R * s.N), std::numeric_limits<float>::quiet_NaN());
      cpu::MatMul(x.data(), s.R, s.K, w.bytes.data(), type, s.N, b, y.data(), s.N, pool);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_LE(std::fabs(double(y[i]) - ref[i]), bound[i])
            << Name(type) << " R=" << s.R << " K=" << s.K << " N=" << s.N << " bias=" << with_bias
            << " at r=" << i / size_t(s.N) << " n=" << i % size_t(s.N) << ": " << y[i] << " vs "
            << ref[i];
      }
      EXPECT_LE(test::RelL2(y.data(), ref.data(), y.size()), Tolerance(s.K)) << Name(type);
    }
  }
}

// ldy > N leaves the gap between rows untouched; x and y one float off 16-byte alignment.
TEST_P(DenseMatMul, StridedAndMisalignedBuffers) {
  const DType type = GetParam();
  ThreadPool pool(2);
  for (const Shape& s : {Shape{1, 37, 13}, Shape{6, 77, 30}, Shape{33, 520, 51}}) {
    const int64_t ldy = s.N + 5;
    const auto w = RandomWeights(type, s.N, s.K, 11);
    std::vector<float> xbuf(size_t(s.R * s.K) + 1);
    const auto xr = RandomFloats(size_t(s.R * s.K), 12);
    std::memcpy(xbuf.data() + 1, xr.data(), xr.size() * 4);
    const float* x = xbuf.data() + 1;
    const auto bias = RandomFloats(size_t(s.N), 13);
    std::vector<float> ybuf(size_t(s.R * ldy) + 1, 12345.0f);
    float* y = ybuf.data() + 1;
    cpu::MatMul(x, s.R, s.K, w.bytes.data(), type, s.N, bias.data(), y, ldy, pool);
    std::vector<double> ref, bound;
    Reference(xr, s.R, s.K, w.values, s.N, bias.data(), &ref, &bound);
    EXPECT_EQ(ybuf[0], 12345.0f);
    for (int64_t r = 0; r < s.R; ++r) {
      for (int64_t n = 0; n < ldy; ++n) {
        const float v = y[r * ldy + n];
        if (n >= s.N) {
          ASSERT_EQ(v, 12345.0f) << "gap written at r=" << r << " n=" << n;
        } else {
          ASSERT_LE(std::fabs(v - ref[size_t(r * s.N + n)]), bound[size_t(r * s.N + n)])
              << Name(type) << " r=" << r << " n=" << n;
        }
      }
    }
  }
}

// The contract: y[r, :] of one call with R rows equals, bit for bit, the R = 1 call on row r, for
// every thread count, and does not change when the other rows hold different (even non-finite)
// values.
TEST_P(DenseMatMul, BatchInvariantBitForBit) {
  const DType type = GetParam();
  ThreadPool pool1(1), pool2(2), pool3(3);
  ThreadPool* pools[] = {&pool1, &pool2, &pool3};
  int checked = 0;
  for (int64_t K : {1, 7, 31, 64, 129, 1000}) {
    for (int64_t N : {1, 3, 17, 100}) {
      const auto w = RandomWeights(type, N, K, uint64_t(K * 1000 + N));
      const auto bias = RandomFloats(size_t(N), uint64_t(N));
      for (int64_t R : {1, 2, 3, 5, 17, 64}) {
        const auto x = RandomFloats(size_t(R * K), uint64_t(R * 7 + K));
        // Per-row references from GEMV calls on the 1-thread pool.
        std::vector<float> rows(size_t(R * N));
        for (int64_t r = 0; r < R; ++r) {
          cpu::MatMul(x.data() + r * K, 1, K, w.bytes.data(), type, N, bias.data(),
                      rows.data() + r * N, N, pool1);
        }
        for (ThreadPool* pool : pools) {
          std::vector<float> y(size_t(R * N));
          cpu::MatMul(x.data(), R, K, w.bytes.data(), type, N, bias.data(), y.data(), N, *pool);
          ASSERT_EQ(0, std::memcmp(y.data(), rows.data(), y.size() * 4))
              << Name(type) << " R=" << R << " K=" << K << " N=" << N
              << " threads=" << pool->size();
          ++checked;
        }
        if (R > 1) {
          // Other rows replaced by huge, infinite and NaN values: row R/2 stays the same.
          auto x2 = x;
          for (int64_t r = 0; r < R; ++r) {
            if (r == R / 2) continue;
            for (int64_t k = 0; k < K; ++k) {
              x2[size_t(r * K + k)] = (k % 3 == 0)   ? std::numeric_limits<float>::quiet_NaN()
                                      : (k % 3 == 1) ? std::numeric_limits<float>::infinity()
                                                     : 3e38f;
            }
          }
          std::vector<float> y(size_t(R * N));
          cpu::MatMul(x2.data(), R, K, w.bytes.data(), type, N, bias.data(), y.data(), N, pool2);
          ASSERT_EQ(0, std::memcmp(y.data() + (R / 2) * N, rows.data() + (R / 2) * N, N * 4))
              << Name(type) << " R=" << R << " K=" << K << " N=" << N;
        }
      }
    }
  }
  EXPECT_EQ(checked, 6 * 4 * 6 * 3);
}

// Large R (several row blocks, a partial last one) against single rows, once per type.
TEST_P(DenseMatMul, BatchInvariantPrefillSized) {
  const DType type = GetParam();
  ThreadPool pool(2);
  const int64_t R = 131, K = 600, N = 75;
  const auto w = RandomWeights(type, N, K, 5);
  const auto x = RandomFloats(size_t(R * K), 6);
  std::vector<float> y(size_t(R * N));
  std::vector<float> row(static_cast<size_t>(N));
  cpu::MatMul(x.data(), R, K, w.bytes.data(), type, N, nullptr, y.data(), N, pool);
  for (int64_t r = 0; r < R; ++r) {
    cpu::MatMul(x.data() + r * K, 1, K, w.bytes.data(), type, N, nullptr, row.data(), N, pool);
    ASSERT_EQ(0, std::memcmp(row.data(), y.data() + r * N, N * 4)) << Name(type) << " r=" << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, DenseMatMul, ::testing::ValuesIn(kDenseTypes),
                         [](const auto& info) { return std::string(Name(info.param)); });

TEST(CpuMatMul, ReportsTargetAndSupport) {
  const std::string target = cpu::SimdTargetName();
  EXPECT_FALSE(target.empty());
  EXPECT_NE(target, "Unknown");
  EXPECT_TRUE(cpu::MatMulSupports(DType::kF32));
  EXPECT_TRUE(cpu::MatMulSupports(DType::kF16));
  EXPECT_TRUE(cpu::MatMulSupports(DType::kBF16));
  EXPECT_FALSE(cpu::MatMulSupports(DType::kI32));
  EXPECT_FALSE(cpu::MatMulSupports(DType::kF8E4M3));
}

TEST(CpuMatMul, RejectsBadArguments) {
  ThreadPool pool(1);
  std::vector<float> x(16, 1.0f), w(16, 1.0f), y(16);
  auto expect_error = [&](auto fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no error, expected one mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(
      [&] { cpu::MatMul(x.data(), 1, 4, w.data(), DType::kI32, 4, nullptr, y.data(), 4, pool); },
      "i32");
  expect_error(
      [&] { cpu::MatMul(x.data(), 2, 4, w.data(), DType::kF32, 4, nullptr, y.data(), 3, pool); },
      "ldy=3");
  expect_error(
      [&] { cpu::MatMul(x.data(), -1, 4, w.data(), DType::kF32, 4, nullptr, y.data(), 4, pool); },
      "negative");
}

TEST(CpuMatMul, EmptyShapesAreNoOps) {
  ThreadPool pool(2);
  std::vector<float> x(8, 1.0f), w(8, 1.0f), y(8, 7.0f);
  cpu::MatMul(x.data(), 0, 4, w.data(), DType::kF32, 2, nullptr, y.data(), 2, pool);
  cpu::MatMul(x.data(), 2, 4, w.data(), DType::kF32, 0, nullptr, y.data(), 0, pool);
  for (float v : y) EXPECT_EQ(v, 7.0f);
  // K = 0: the empty sum plus bias.
  const float bias[2] = {1.5f, -2.0f};
  cpu::MatMul(x.data(), 3, 0, w.data(), DType::kBF16, 2, bias, y.data(), 2, pool);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(y[size_t(2 * r)], 1.5f);
    EXPECT_EQ(y[size_t(2 * r + 1)], -2.0f);
  }
}

}  // namespace
}  // namespace es
