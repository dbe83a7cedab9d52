// Tests of the ARM64 quantized matmul paths (matmul_quant_arm.cpp): every path this CPU has
// (plain NEON, dotprod, i8mm) gives bit-identical outputs to plain NEON, for every quantized type,
// with R = 1 and R > 1 (i8mm's SMMLA tiles and their leftovers), odd N, bias on and off and 1 or
// 3 threads; every GEMM row equals that row alone (GEMV); outputs are close to the f32 reference
// over the dequantized weights. Run under qemu-user in CI on a CPU model with dotprod and i8mm
// and on one without (scripts/test_arm64.sh). On other architectures they skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/kernels/matmul.h"
#include "backends/cpu/kernels/matmul_quant_arm.h"
#include "edgeseek/internal/quant/blocks.h"
#include "matmul_case_util.h"
#include "test_util.h"

namespace es {
namespace {

using cpu::ArmQuantPath;

using test::kQuantMatMulTypes;
using test::RandomWeights;

// The paths this CPU can run, plain NEON first.
std::vector<ArmQuantPath> Paths() {
  std::vector<ArmQuantPath> p;
  for (int i = int(ArmQuantPath::kNeon); i <= int(cpu::ArmQuantPathBest()); ++i) {
    p.push_back(ArmQuantPath(i));
  }
  return p;
}

TEST(CpuMatMulArm, PathNames) {
  EXPECT_STREQ(cpu::ArmQuantPathName(ArmQuantPath::kNeon), "NEON");
  EXPECT_STREQ(cpu::ArmQuantPathName(ArmQuantPath::kDotprod), "NEON+dotprod");
  EXPECT_STREQ(cpu::ArmQuantPathName(ArmQuantPath::kI8mm), "NEON+dotprod+i8mm");
#if !defined(__aarch64__)
  EXPECT_EQ(cpu::ArmQuantPathBest(), ArmQuantPath::kNone);
#endif
}

// The path MatMul takes is the CPU's best lowered by ES_CPU_ARM_PATH, SimdTargetName() names
// it, and MatMul's output is that path's.
TEST(CpuMatMulArm, ActivePathFollowsTheEnvironment) {
  if (cpu::ArmQuantPathBest() == ArmQuantPath::kNone) GTEST_SKIP() << "not an ARM64 CPU";
  const ArmQuantPath best = cpu::ArmQuantPathBest(), active = cpu::ArmQuantPathActive();
  std::printf("ARM integer paths: best %s, active %s; SimdTargetName: %s\n",
              cpu::ArmQuantPathName(best), cpu::ArmQuantPathName(active), cpu::SimdTargetName());
  ArmQuantPath want = best;
  if (const char* env = std::getenv("ES_CPU_ARM_PATH")) {
    const std::string v = env;
    if (v == "neon") want = ArmQuantPath::kNeon;
    if (v == "dotprod") want = ArmQuantPath::kDotprod;
    if (v == "i8mm") want = ArmQuantPath::kI8mm;
  }
  EXPECT_EQ(int(active), int(std::min(want, best)));
  const std::string name = cpu::SimdTargetName();
  EXPECT_NE(name.find(std::string("int8 ") + cpu::ArmQuantPathName(active)), std::string::npos)
      << name;
  ThreadPool pool(2);
  const int64_t R = 5, K = 2 * kQKK, N = 7;
  const auto x = test::RandomFloats(size_t(R * K), 5);
  for (DType type : kQuantMatMulTypes) {
    const auto w = RandomWeights(type, N, K, 11).bytes;
    std::vector<float> y(size_t(R * N)), yp(size_t(R * N));
    cpu::MatMul(x.data(), R, K, w.data(), type, N, nullptr, y.data(), N, pool);
    cpu::ArmQuantMatMul(active, x.data(), R, K, w.data(), type, N, nullptr, yp.data(), N, pool);
    EXPECT_EQ(0, std::memcmp(y.data(), yp.data(), y.size() * 4)) << Name(type);
  }
}

// The contract: NEON, dotprod and i8mm agree bit for bit, GEMM rows equal GEMV rows, and all
// are within the activation-rounding error of the f32 reference.
TEST(CpuMatMulArm, PathsAreBitIdenticalAndBatchInvariant) {
  if (cpu::ArmQuantPathBest() == ArmQuantPath::kNone) GTEST_SKIP() << "not an ARM64 CPU";
  const std::vector<ArmQuantPath> paths = Paths();
  std::string names;
  for (ArmQuantPath p : paths)
    names += std::string(names.empty() ? "" : " ") + cpu::ArmQuantPathName(p);
  std::printf("ARM paths checked: %s\n", names.c_str());
  RecordProperty("paths", names);
  ThreadPool pool1(1), pool3(3);
  for (DType type : kQuantMatMulTypes) {
    const int64_t be = BlockElems(type);
    for (int64_t blocks : {int64_t(1), int64_t(3), be == kQK ? int64_t(7) : int64_t(2)}) {
      const int64_t K = blocks * be;
      for (int64_t N : {1, 5, 13, 37}) {
        const auto wt = RandomWeights(type, N, K, uint64_t(K * 7 + N));
        const auto& w = wt.bytes;
        const auto bias = test::RandomFloats(size_t(N), uint64_t(N + 3), 0.5f);
        for (int64_t R : {1, 3, 7, 33}) {
          const auto x = test::RandomFloats(size_t(R * K), uint64_t(R * 13 + K));
          // f64 reference (the bias is added below) and the bound of the activation rounding
          // (matmul_case_util.h), f32 slack 1e-6.
          std::vector<double> ref, bound;
          test::QuantMatMulReference(x, R, K, wt.values, N, nullptr, test::ActivationLevels(type),
                                     &ref, &bound, 1e-6);
          for (bool with_bias : {false, true}) {
            const float* b = with_bias ? bias.data() : nullptr;
            std::vector<float> first;  // plain NEON's output
            for (ArmQuantPath path : paths) {
              const std::string where = std::string(cpu::ArmQuantPathName(path)) + " " +
                                        std::string(Name(type)) + " R=" + std::to_string(R) +
                                        " K=" + std::to_string(K) + " N=" + std::to_string(N) +
                                        (with_bias ? " bias" : "");
              std::vector<float> y(size_t(R * N)), y3(size_t(R * N)), rows(size_t(R * N));
              cpu::ArmQuantMatMul(path, x.data(), R, K, w.data(), type, N, b, y.data(), N, pool1);
              cpu::ArmQuantMatMul(path, x.data(), R, K, w.data(), type, N, b, y3.data(), N, pool3);
              for (int64_t r = 0; r < R; ++r) {
                cpu::ArmQuantMatMul(path, x.data() + r * K, 1, K, w.data(), type, N, b,
                                    rows.data() + r * N, N, pool1);
              }
              ASSERT_EQ(0, std::memcmp(y.data(), y3.data(), y.size() * 4)) << where << " threads";
              ASSERT_EQ(0, std::memcmp(y.data(), rows.data(), y.size() * 4)) << where << " GEMV";
              if (first.empty()) {
                first = y;
                for (size_t i = 0; i < y.size(); ++i) {
                  const double want = ref[i] + (b ? b[i % size_t(N)] : 0.0);
                  ASSERT_LE(std::fabs(double(y[i]) - want), bound[i] + 1e-6 * std::fabs(want))
                      << where << " at " << i;
                }
              } else {
                ASSERT_EQ(0, std::memcmp(y.data(), first.data(), y.size() * 4))
                    << where << " differs from NEON";
              }
            }
          }
        }
      }
    }
  }
}

// Which kernel computes a column (the 4-column GEMV, the single-column tail, the 4×4 SMMLA tile)
// depends on its position; its bits must not: every column of a sub-matrix W[n0 .. n0 + m)
// equals that column of the full product.
TEST(CpuMatMulArm, ColumnPositionDoesNotChangeBits) {
  if (cpu::ArmQuantPathBest() == ArmQuantPath::kNone) GTEST_SKIP() << "not an ARM64 CPU";
  ThreadPool pool(2);
  const int64_t R = 6, N = 11;
  for (DType type : kQuantMatMulTypes) {
    const int64_t K = 2 * BlockElems(type);
    const size_t row = RowBytes(type, K);
    const auto w = RandomWeights(type, N, K, 21).bytes;
    const auto x = test::RandomFloats(size_t(R * K), 22);
    for (ArmQuantPath path : Paths()) {
      std::vector<float> full(size_t(R * N));
      cpu::ArmQuantMatMul(path, x.data(), R, K, w.data(), type, N, nullptr, full.data(), N, pool);
      for (int64_t n0 : {1, 2, 3, 5}) {
        for (int64_t m : {1, 3, 4, 6}) {
          if (n0 + m > N) continue;
          std::vector<float> part(size_t(R * m));
          cpu::ArmQuantMatMul(path, x.data(), R, K, w.data() + size_t(n0) * row, type, m, nullptr,
                              part.data(), m, pool);
          for (int64_t r = 0; r < R; ++r) {
            ASSERT_EQ(0, std::memcmp(part.data() + r * m, full.data() + r * N + n0, size_t(m) * 4))
                << cpu::ArmQuantPathName(path) << " " << Name(type) << " n0=" << n0 << " m=" << m
                << " r=" << r;
          }
        }
      }
    }
  }
}

// Extremes of the integer parts: Q8_0 weights of -128 against int16 activations of ±32512 and
// of -32384 (whose split low byte is -128), int8 activations of ±127, and a row of NaN inputs
// next to finite ones: still identical on every path, NaN only in the NaN row.
TEST(CpuMatMulArm, ExtremeValuesAgreeOnEveryPath) {
  if (cpu::ArmQuantPathBest() == ArmQuantPath::kNone) GTEST_SKIP() << "not an ARM64 CPU";
  ThreadPool pool(2);
  const int64_t R = 9, N = 8;
  const int kVals[] = {32512, -32512, -32384, 128, -128, 32383, -1, 0, 255, -257, 16384};
  for (DType type : kQuantMatMulTypes) {
    const int64_t K = 2 * BlockElems(type);
    std::vector<uint8_t> w = RandomWeights(type, N, K, 3).bytes;
    if (type == DType::kQ8_0) {  // the quantizer stops at -127; the format allows -128
      auto* blk = reinterpret_cast<BlockQ8_0*>(w.data());
      for (int64_t i = 0; i < N * K / kQK; ++i) {
        for (int j = 0; j < kQK; j += 3) blk[i].qs[j] = -128;
      }
    }
    std::vector<float> x(size_t(R * K));
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = float(kVals[(i + i / kQK) % (sizeof(kVals) / sizeof(kVals[0]))]) / 32512.0f;
      if (i % kQK == 7) x[i] = 1.0f;  // every block's absmax
    }
    for (int64_t k = 0; k < K; ++k) x[size_t(4 * K + k)] = std::nanf("");
    std::vector<float> first;
    for (ArmQuantPath path : Paths()) {
      std::vector<float> y(size_t(R * N));
      cpu::ArmQuantMatMul(path, x.data(), R, K, w.data(), type, N, nullptr, y.data(), N, pool);
      for (int64_t i = 0; i < R * N; ++i) {
        ASSERT_EQ(std::isnan(y[size_t(i)]), i / N == 4) << Name(type) << " at " << i;
      }
      if (first.empty()) {
        first = y;
      } else {
        ASSERT_EQ(0, std::memcmp(y.data(), first.data(), y.size() * 4))
            << cpu::ArmQuantPathName(path) << " " << Name(type);
      }
    }
  }
}

}  // namespace
}  // namespace es
