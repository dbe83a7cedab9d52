// Tests of the CPU matmul kernels for block-quantized weights (every type of
// test::kQuantMatMulTypes): against a double reference over the dequantized weights
// (es::Dequantize, the scalar truth of src/quant), over odd numbers of blocks; exactness when the
// activations quantize losslessly; the batch-invariance contract bit for bit; and bad shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/kernels/matmul.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/quant/blocks.h"
#include "matmul_case_util.h"
#include "test_util.h"

namespace es {
namespace {

using test::RandomFloats;

using test::ActivationLevels;
using test::QuantMatMulReference;
using test::RandomWeights;

class QuantMatMul : public ::testing::TestWithParam<DType> {};

TEST_P(QuantMatMul, MatchesDequantizedReference) {
  const DType type = GetParam();
  ThreadPool pool(2);
  struct Shape {
    int64_t R, blocks, N;  // K = blocks * BlockElems(type): odd numbers of blocks
  };
  for (const Shape& sb : {Shape{1, 1, 1}, Shape{1, 3, 37}, Shape{3, 7, 5}, Shape{17, 33, 9},
                          Shape{40, 5, 70}, Shape{1, 48, 33}}) {
    const int64_t R = sb.R, K = sb.blocks * BlockElems(type), N = sb.N;
    for (bool with_bias : {false, true}) {
      const auto w = RandomWeights(type, N, K, uint64_t(K + N));
      const auto x = RandomFloats(size_t(R * K), uint64_t(R), 1.0f);
      const auto bias = RandomFloats(size_t(N), 9, 0.5f);
      const float* b = with_bias ? bias.data() : nullptr;
      std::vector<double> ref, bound;
      QuantMatMulReference(x, R, K, w.values, N, b, ActivationLevels(type), &ref, &bound);
      std::vector<float> y(size_t(R * N), std::numeric_limits<float>::quiet_NaN());
      cpu::MatMul(x.data(), R, K, w.bytes.data(), type, N, b, y.data(), N, pool);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_LE(std::fabs(double(y[i]) - ref[i]), bound[i])
            << Name(type) << " R=" << R << " K=" << K << " N=" << N << " at " << i;
      }
      // Typical int8 activation error: ~0.5% of the result's norm on uniform data; Q8_0's int16
      // activations: f32 rounding.
      EXPECT_LE(test::RelL2(y.data(), ref.data(), y.size()), type == DType::kQ8_0 ? 1e-4 : 0.02)
          << Name(type) << " K=" << K;
    }
  }
}

// Activations that are integer multiples of a power of two with block absmax 127·s quantize
// without loss, so the kernel must agree with the dequantized reference to f32 rounding.
TEST_P(QuantMatMul, ExactForLosslessActivations) {
  const DType type = GetParam();
  ThreadPool pool(2);
  const int64_t R = 5, N = 19;
  const int64_t K = BlockElems(type) == kQK ? 11 * kQK : 3 * BlockElems(type);
  const auto w = RandomWeights(type, N, K, 77);
  std::vector<float> x(size_t(R * K));
  uint32_t s = 1;
  for (size_t i = 0; i < x.size(); ++i) {
    s = s * 1103515245u + 12345u;
    const float scale = std::ldexp(1.0f, int((i / kQK) % 7) - 3);
    const int q = (i % kQK == 5) ? 127 : int((s >> 16) % 255) - 127;
    x[i] = float(q) * scale;
  }
  std::vector<double> ref, bound;
  QuantMatMulReference(x, R, K, w.values, N, nullptr, 127.0, &ref, &bound);
  std::vector<float> y(size_t(R * N));
  cpu::MatMul(x.data(), R, K, w.bytes.data(), type, N, nullptr, y.data(), N, pool);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t n = 0; n < N; ++n) {
      double mag = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        mag += std::fabs(double(x[size_t(r * K + k)]) * w.values[size_t(n * K + k)]);
      }
      ASSERT_LE(std::fabs(y[size_t(r * N + n)] - ref[size_t(r * N + n)]),
                (1e-6 * std::sqrt(double(K)) + 1e-7) * mag)
          << Name(type) << " r=" << r << " n=" << n;
    }
  }
}

TEST_P(QuantMatMul, BatchInvariantBitForBit) {
  const DType type = GetParam();
  ThreadPool pool1(1), pool2(2), pool3(3);
  ThreadPool* pools[] = {&pool1, &pool2, &pool3};
  const int64_t be = BlockElems(type);
  for (int64_t blocks : {int64_t(1), int64_t(3), int64_t(10), be == kQK ? int64_t(32) : 0}) {
    if (blocks == 0) continue;
    const int64_t K = blocks * be;
    for (int64_t N : {1, 3, 17, 100}) {
      const auto w = RandomWeights(type, N, K, uint64_t(K * 31 + N));
      const auto bias = RandomFloats(size_t(N), uint64_t(N));
      for (int64_t R : {1, 2, 3, 5, 17, 64}) {
        const auto x = RandomFloats(size_t(R * K), uint64_t(R * 5 + K));
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
        }
        if (R > 1) {
          auto x2 = x;
          for (int64_t r = 0; r < R; ++r) {
            if (r == R / 2) continue;
            for (int64_t k = 0; k < K; ++k) {
              x2[size_t(r * K + k)] = (k % 2) ? std::numeric_limits<float>::quiet_NaN() : 1e30f;
            }
          }
          std::vector<float> y(size_t(R * N));
          cpu::MatMul(x2.data(), R, K, w.bytes.data(), type, N, bias.data(), y.data(), N, pool2);
          ASSERT_EQ(0, std::memcmp(y.data() + (R / 2) * N, rows.data() + (R / 2) * N, N * 4))
              << Name(type) << " R=" << R << " K=" << K << " N=" << N;
          EXPECT_TRUE(std::isnan(y[0]));  // a row of NaN activations gives NaN, not garbage
        }
      }
    }
  }
}

// The shapes around the kernels' tiles: Q4_0's GEMM takes 4 activation rows × 8 columns at a
// time in tasks of 64 rows × 32 columns, its GEMV 8 columns; other types 4 columns. Q4_0 and
// Q8_0 up to 4 rows (batched decode) take the skinny GEMM, 7, 8, 9 the panel GEMM. R not a
// multiple of the row tile or the task, N not a multiple of the column group, K = one block and
// K = 8960 (the FFN down projection): every row bit for bit equal to the row alone, with 1 and
// 2 threads, and within the activation-rounding bound of the reference.
TEST_P(QuantMatMul, TileEdgesBitForBit) {
  const DType type = GetParam();
  ThreadPool pool1(1), pool2(2);
  const int64_t be = BlockElems(type);
  for (int64_t K : {be, int64_t(8960) / be * be}) {
    for (int64_t N : {8, 9, 31, 40}) {
      const auto w = RandomWeights(type, N, K, uint64_t(K + 3 * N));
      const auto bias = RandomFloats(size_t(N), uint64_t(N + 1));
      for (int64_t R : {2, 4, 7, 8, 9, 65, 131}) {
        if (K > be && R == 65) continue;  // the large K runs R = 4, 7, 131
        const auto x = RandomFloats(size_t(R * K), uint64_t(R * 7 + K));
        std::vector<float> rows(size_t(R * N));
        for (int64_t r = 0; r < R; ++r) {
          cpu::MatMul(x.data() + r * K, 1, K, w.bytes.data(), type, N, bias.data(),
                      rows.data() + r * N, N, pool2);
        }
        for (ThreadPool* pool : {&pool1, &pool2}) {
          std::vector<float> y(size_t(R * N));
          cpu::MatMul(x.data(), R, K, w.bytes.data(), type, N, bias.data(), y.data(), N, *pool);
          ASSERT_EQ(0, std::memcmp(y.data(), rows.data(), y.size() * 4))
              << Name(type) << " R=" << R << " K=" << K << " N=" << N
              << " threads=" << pool->size();
        }
        if (R == 7) {
          std::vector<double> ref, bound;
          QuantMatMulReference(x, R, K, w.values, N, bias.data(), ActivationLevels(type), &ref,
                               &bound);
          for (size_t i = 0; i < rows.size(); ++i) {
            ASSERT_LE(std::fabs(double(rows[i]) - ref[i]), bound[i])
                << Name(type) << " K=" << K << " N=" << N << " at " << i;
          }
        }
      }
    }
  }
}

// Batched decode steps of 1..8 rows (the skinny GEMMs: Q4_0 on AVX3_DL takes 16-column groups
// for up to 8 rows, the 8-column kernels up to 4): N not a multiple of 8 or 16 (a zero-padded
// last group), K of one and of odd numbers of blocks, a bias and a strided y. Every row bit for
// bit the row alone (the GEMV), every output within the bound of the plain reference, and the
// padding of y untouched.
TEST_P(QuantMatMul, SkinnyRowsBitForBit) {
  const DType type = GetParam();
  ThreadPool pool1(1), pool2(2);
  const int64_t be = BlockElems(type);
  for (int64_t blocks : {int64_t(1), int64_t(5), be == kQK ? int64_t(47) : int64_t(3)}) {
    const int64_t K = blocks * be;
    for (int64_t N : {5, 16, 23, 33, 40}) {
      const auto w = RandomWeights(type, N, K, uint64_t(K * 13 + N));
      const auto bias = RandomFloats(size_t(N), uint64_t(N + 5));
      for (int64_t R = 1; R <= 8; ++R) {
        const auto x = RandomFloats(size_t(R * K), uint64_t(R * 11 + K));
        const int64_t ldy = N + 3;
        std::vector<float> rows(size_t(R * N));
        for (int64_t r = 0; r < R; ++r) {
          cpu::MatMul(x.data() + r * K, 1, K, w.bytes.data(), type, N, bias.data(),
                      rows.data() + r * N, N, pool1);
        }
        for (ThreadPool* pool : {&pool1, &pool2}) {
          std::vector<float> y(size_t(R * ldy), -7.0f);
          cpu::MatMul(x.data(), R, K, w.bytes.data(), type, N, bias.data(), y.data(), ldy, *pool);
          for (int64_t r = 0; r < R; ++r) {
            ASSERT_EQ(0, std::memcmp(y.data() + r * ldy, rows.data() + r * N, size_t(N) * 4))
                << Name(type) << " R=" << R << " K=" << K << " N=" << N << " row " << r
                << " threads=" << pool->size();
            for (int64_t n = N; n < ldy; ++n) ASSERT_EQ(y[size_t(r * ldy + n)], -7.0f);
          }
        }
        std::vector<double> ref, bound;
        QuantMatMulReference(x, R, K, w.values, N, bias.data(), ActivationLevels(type), &ref,
                             &bound);
        for (size_t i = 0; i < rows.size(); ++i) {
          ASSERT_LE(std::fabs(double(rows[i]) - ref[i]), bound[i])
              << Name(type) << " R=" << R << " K=" << K << " N=" << N << " at " << i;
        }
      }
    }
  }
}

TEST_P(QuantMatMul, StridedOutputAndMisalignedActivations) {
  const DType type = GetParam();
  ThreadPool pool(2);
  const int64_t R = 7, K = 5 * BlockElems(type), N = 13, ldy = 20;
  const auto w = RandomWeights(type, N, K, 4);
  std::vector<float> xbuf(size_t(R * K) + 1);
  const auto xr = RandomFloats(size_t(R * K), 8);
  std::memcpy(xbuf.data() + 1, xr.data(), xr.size() * 4);
  std::vector<float> ybuf(size_t(R * ldy) + 1, -5.0f);
  cpu::MatMul(xbuf.data() + 1, R, K, w.bytes.data(), type, N, nullptr, ybuf.data() + 1, ldy, pool);
  std::vector<double> ref, bound;
  QuantMatMulReference(xr, R, K, w.values, N, nullptr, 127.0, &ref, &bound);
  EXPECT_EQ(ybuf[0], -5.0f);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t n = 0; n < ldy; ++n) {
      const float v = ybuf[size_t(1 + r * ldy + n)];
      if (n >= N) {
        ASSERT_EQ(v, -5.0f);
      } else {
        ASSERT_LE(std::fabs(v - ref[size_t(r * N + n)]), bound[size_t(r * N + n)]);
      }
    }
  }
}

TEST_P(QuantMatMul, RejectsKNotAMultipleOfTheBlock) {
  const DType type = GetParam();
  ThreadPool pool(1);
  std::vector<uint8_t> w(4096);
  std::vector<float> x(1024), y(4);
  const int64_t K = BlockElems(type) + 16;
  try {
    cpu::MatMul(x.data(), 1, K, w.data(), type, 1, nullptr, y.data(), 1, pool);
    ADD_FAILURE() << "K=" << K << " accepted for " << Name(type);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("K=" + std::to_string(K)), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantMatMul, ::testing::ValuesIn(test::kQuantMatMulTypes),
                         [](const auto& info) { return std::string(Name(info.param)); });
// I4F (matmul_i4f-inl.h): the same cases with f32 activations (ActivationLevels: exact), so its
// bound is f32 rounding alone. Not in kQuantMatMulTypes: no ARM64 int8 path takes it.
INSTANTIATE_TEST_SUITE_P(F32Activations, QuantMatMul, ::testing::Values(DType::kI4F),
                         [](const auto& info) { return std::string(Name(info.param)); });

TEST(CpuMatMulQuant, Supports) {
  EXPECT_TRUE(cpu::MatMulSupports(DType::kQ8_0));
  EXPECT_TRUE(cpu::MatMulSupports(DType::kQ4_0));
  EXPECT_TRUE(cpu::MatMulSupports(DType::kI4G));
  EXPECT_TRUE(cpu::MatMulSupports(DType::kI4F));
  EXPECT_TRUE(cpu::MatMulSupports(DType::kQ4_K));
  EXPECT_TRUE(cpu::MatMulSupports(DType::kQ6_K));
  EXPECT_TRUE(cpu::MatMulSupports(DType::kQ4_1));
  EXPECT_TRUE(cpu::MatMulSupports(DType::kQ5_0));
  EXPECT_TRUE(cpu::MatMulSupports(DType::kQ5_1));
  EXPECT_TRUE(cpu::MatMulSupports(DType::kQ5_K));
  EXPECT_FALSE(cpu::MatMulSupports(DType::kQ8_K));
}

}  // namespace
}  // namespace es
