// Runs the CPU matmul kernels on every SIMD target this binary was compiled for and this CPU
// supports (on an AVX2 machine: AVX2, SSE4, SSSE3, EMU128), forcing each in turn through
// Highway's test hook, so the paths that other machines would pick (and the portable, non-x86
// quantized path) are checked here too: accuracy against a double reference and batch invariance
// within each target.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/kernels/matmul.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/quant/blocks.h"
// matmul.cpp compiles Highway's AVX3_DL target (AVX-512 VNNI) too; list it here as well, so that
// SupportedAndGeneratedTargets() forces it on CPUs that have it.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL 1
#endif
#include "hwy/targets.h"
#include "matmul_case_util.h"
#include "test_util.h"

namespace es {
namespace {

// Restores normal target selection when a test ends, whatever happened.
struct ForcedTarget {
  explicit ForcedTarget(int64_t t) { hwy::SetSupportedTargetsForTest(t); }
  ~ForcedTarget() { hwy::SetSupportedTargetsForTest(0); }
};

TEST(CpuMatMulTargets, EveryTargetIsAccurateAndBatchInvariant) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  std::string names;
  for (int64_t t : targets) names += std::string(names.empty() ? "" : " ") + hwy::TargetName(t);
  RecordProperty("targets", names);
  std::printf("targets checked: %s\n", names.c_str());
  ThreadPool pool(2);
  const int64_t R = 9, K = 512, N = 23;
  const auto x = test::RandomFloats(size_t(R * K), 42);
  const auto bias = test::RandomFloats(size_t(N), 43);
  for (int64_t target : targets) {
    ForcedTarget forced(target);
    // On ARM64 the name goes on with the quantized kernels' integer path ("NEON, int8 ...").
    EXPECT_EQ(std::string(cpu::SimdTargetName()).rfind(hwy::TargetName(target), 0), 0u)
        << cpu::SimdTargetName();
    for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                       DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kI4G, DType::kI4F,
                       DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
      const auto wt = test::RandomWeights(type, N, K, uint64_t(K * 3 + N));
      const std::vector<uint8_t>& w = wt.bytes;
      const std::vector<float>& wv = wt.values;
      std::vector<float> y(size_t(R * N)), row(static_cast<size_t>(N));
      cpu::MatMul(x.data(), R, K, w.data(), type, N, bias.data(), y.data(), N, pool);
      // Quantized types also carry the int8 activation error (~0.5% on uniform data).
      const double tol = IsQuantized(type) ? 0.02 : 1e-6 * std::sqrt(double(K));
      std::vector<double> ref(size_t(R * N));
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t n = 0; n < N; ++n) {
          double s = bias[size_t(n)];
          for (int64_t k = 0; k < K; ++k) {
            s += double(x[size_t(r * K + k)]) * wv[size_t(n * K + k)];
          }
          ref[size_t(r * N + n)] = s;
        }
      }
      EXPECT_LE(test::RelL2(y.data(), ref.data(), y.size()), tol)
          << hwy::TargetName(target) << " " << Name(type);
      for (int64_t r = 0; r < R; ++r) {
        cpu::MatMul(x.data() + r * K, 1, K, w.data(), type, N, bias.data(), row.data(), N, pool);
        ASSERT_EQ(0, std::memcmp(row.data(), y.data() + r * N, size_t(N) * 4))
            << hwy::TargetName(target) << " " << Name(type) << " row " << r;
      }
    }
  }
}

// Q4_0, Q8_0, Q4_K, Q5_K and Q6_K on x86 take the column-lane kernels (matmul_lanes-inl.h,
// matmul_lanes_k-inl.h) on AVX2 and every target above it; their integer parts are exact and their
// float operations the same, so those targets must agree bit for bit — in particular AVX3_DL,
// whose row dots run on VNNI (vpdpbusd; K-quant scales through vpmulld) instead of maddubs. GEMV,
// skinny GEMM (2..4 rows) and panel GEMM (5+), odd K and a partial last group of columns.
TEST(CpuMatMulTargets, LaneKernelsGiveTheSameBitsOnEveryAvx2PlusTarget) {
  std::vector<int64_t> targets;
#if HWY_ARCH_X86
  for (int64_t t : hwy::SupportedAndGeneratedTargets())
    if (t <= HWY_AVX2) targets.push_back(t);  // AVX2, AVX3, AVX3_DL, ...
#endif
  if (targets.size() < 2) GTEST_SKIP() << "fewer than two AVX2+ targets on this CPU";
  ThreadPool pool(2);
  for (const int64_t K : {32, 96, 544, 256, 768}) {
    for (const int64_t N : {8, 23, 57}) {
      for (const int64_t R : {1, 2, 3, 4, 5, 9}) {
        const auto x = test::RandomFloats(size_t(R * K), uint64_t(K + N + R));
        for (DType type : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
          if (K % BlockElems(type) != 0) continue;
          const auto wt = test::RandomWeights(type, N, K, uint64_t(K * 7 + N));
          std::vector<float> first;
          for (int64_t target : targets) {
            ForcedTarget forced(target);
            std::vector<float> y(size_t(R * N));
            cpu::MatMul(x.data(), R, K, wt.bytes.data(), type, N, nullptr, y.data(), N, pool);
            if (first.empty()) {
              first = y;
              continue;
            }
            for (size_t i = 0; i < y.size(); ++i)
              ASSERT_EQ(0, std::memcmp(&y[i], &first[i], 4))
                  << hwy::TargetName(target) << " against " << hwy::TargetName(targets[0]) << " "
                  << Name(type) << " R " << R << " K " << K << " N " << N << " output " << i << ": "
                  << y[i] << " vs " << first[i];
          }
        }
      }
    }
  }
}

// One target's checks of a prefill GEMM in the wide-GEMM tile-edge tests below: every row of the
// GEMM (bias, y strided by N + 5) is the GEMV of that row bit for bit on 1 and 2 threads, y's
// padding stays untouched, MatMulPair's two outputs are MatMul's, and MatMulEpi's epilogue sees
// each output exactly once, after it is written (bits compared: ~1e30 activations give infs).
// rows: the GEMVs [R, N] with the bias; ya_alone: MatMul of wa without it, [R, N + 5].
void CheckWideGemm(const std::vector<float>& x, int64_t R, int64_t K, DType type, int64_t N,
                   const uint8_t* wa, const uint8_t* wb, const float* bias, ThreadPool& pool1,
                   ThreadPool& pool2, const std::string& what, std::vector<float>* rows,
                   std::vector<float>* ya_alone) {
  const int64_t ldy = N + 5;
  rows->assign(size_t(R * N), 0.0f);
  ya_alone->assign(size_t(R * ldy), -7.0f);
  for (int64_t r = 0; r < R; ++r)
    cpu::MatMul(x.data() + r * K, 1, K, wa, type, N, bias, rows->data() + r * N, N, pool1);
  for (ThreadPool* pool : {&pool1, &pool2}) {
    std::vector<float> y(size_t(R * ldy), -7.0f);
    cpu::MatMul(x.data(), R, K, wa, type, N, bias, y.data(), ldy, *pool);
    for (int64_t r = 0; r < R; ++r) {
      ASSERT_EQ(0, std::memcmp(y.data() + r * ldy, rows->data() + r * N, size_t(N) * 4))
          << what << " row " << r << " threads " << pool->size();
      for (int64_t n = N; n < ldy; ++n)
        ASSERT_EQ(y[size_t(r * ldy + n)], -7.0f) << what << " row " << r;
    }
  }
  // The pair (no bias) against each weight alone.
  std::vector<float> ya(size_t(R * ldy), -7.0f), yb = ya, yb_alone = ya;
  cpu::MatMul(x.data(), R, K, wa, type, N, nullptr, ya_alone->data(), ldy, pool2);
  cpu::MatMul(x.data(), R, K, wb, type, N, nullptr, yb_alone.data(), ldy, pool2);
  cpu::MatMulPair(x.data(), R, K, wa, wb, type, N, ya.data(), yb.data(), ldy, pool2);
  ASSERT_EQ(0, std::memcmp(ya.data(), ya_alone->data(), ya.size() * 4)) << what;
  ASSERT_EQ(0, std::memcmp(yb.data(), yb_alone.data(), yb.size() * 4)) << what;
  // The epilogue: every output once, after it is written.
  std::vector<float> ye(size_t(R * ldy), -7.0f);
  std::vector<int> seen(size_t(R * N), 0);
  std::atomic<bool> early{false};
  cpu::MatMulEpi(
      x.data(), R, K, wa, type, N, nullptr, ye.data(), ldy,
      [&](int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
        for (int64_t r = r0; r < r1; ++r) {
          for (int64_t n = n0; n < n1; ++n) {
            ++seen[size_t(r * N + n)];
            const size_t i = size_t(r * ldy + n);
            if (std::memcmp(&ye[i], &(*ya_alone)[i], 4) != 0) early = true;
          }
        }
      },
      pool2);
  EXPECT_FALSE(early.load()) << what;
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << what << " output " << i;
}

// Q4_0's and Q8_0's prefill GEMM (R > 8) on AVX3_DL runs its own kernels (matmul_lanes-inl.h
// LaneWideGemm: 16-column groups, 8-row register tiles, tasks of 128 rows × 32 columns); the other
// targets run the 8-column 4-row ones. On every AVX2+ target, around those tiles — rows 1..9,
// 15..17, 63..65, 127..129 and 137, N = 1, 15, 17, 23, 40, 57 (partial 16- and 8-column groups),
// K of 1, 3 and 17 blocks (Q8_0: K of 1 and 17 blocks, N = 1, 17, 40, 57) — every row of the GEMM
// (bias, strided y) is the GEMV of that row bit for bit, the padding of y stays untouched,
// MatMulPair's two outputs are MatMul's, MatMulEpi's epilogue sees each output exactly once, and
// every target gives the first one's bits (off x86: the best target alone), also with an all-zero
// and a huge activation block (and for Q8_0 a weight block of −128s against it: the largest int32
// sums).
TEST(CpuMatMulTargets, Q40AndQ80WideGemmTileEdgesOnEveryAvx2PlusTarget) {
  std::vector<int64_t> targets;
#if HWY_ARCH_X86
  for (int64_t t : hwy::SupportedAndGeneratedTargets())
    if (t <= HWY_AVX2) targets.push_back(t);  // AVX2, AVX3, AVX3_DL, ...
#endif
  // Elsewhere (ARM64, pre-AVX2 x86) the best target, for the row, pair and epilogue checks.
  if (targets.empty()) targets.push_back(hwy::SupportedAndGeneratedTargets().front());
  ThreadPool pool1(1), pool2(2);
  const std::vector<int64_t> rows_list = {1,  2,  3,  4,  5,  6,   7,   8,   9,  15,
                                          16, 17, 63, 64, 65, 127, 128, 129, 137};
  for (const DType type : {DType::kQ4_0, DType::kQ8_0}) {
    // Fewer K and N for Q8_0 (152 cases against Q4_0's 342; the driver's tile edges are Q4_0's):
    // the test's run time under qemu (scripts/test_arm64.sh).
    const bool q4 = type == DType::kQ4_0;
    const std::vector<int64_t> k_list =
        q4 ? std::vector<int64_t>{32, 96, 544} : std::vector<int64_t>{32, 544};
    const std::vector<int64_t> n_list =
        q4 ? std::vector<int64_t>{1, 15, 17, 23, 40, 57} : std::vector<int64_t>{1, 17, 40, 57};
    for (const int64_t K : k_list) {
      for (const int64_t N : n_list) {
        auto wa = test::RandomWeights(type, N, K, uint64_t(K * 11 + N));
        const auto wb = test::RandomWeights(type, N, K, uint64_t(K * 13 + N));
        if (type == DType::kQ8_0) {  // the last block of the last column: every quant −128
          const size_t row_bytes = RowBytes(type, K);
          std::memset(wa.bytes.data() + size_t(N) * row_bytes - kQK, 0x80, kQK);
        }
        const auto bias = test::RandomFloats(size_t(N), uint64_t(N + 9));
        for (const int64_t R : rows_list) {
          auto x = test::RandomFloats(size_t(R * K), uint64_t(K * 3 + N + R));
          // An all-zero block (d = 0) in row 0 and a block of ~1e30 in the last row (the
          // activation quantizer's extremes; AVX3_DL runs its own, QuantizeQ40RowZ).
          std::fill(x.begin(), x.begin() + 32, 0.0f);
          for (size_t k = size_t(R * K) - 32; k < size_t(R * K); ++k) x[k] *= 1e30f;
          std::vector<float> first;
          for (int64_t target : targets) {
            ForcedTarget forced(target);
            const std::string what = std::string(hwy::TargetName(target)) + " " +
                                     std::string(Name(type)) + " R " + std::to_string(R) + " K " +
                                     std::to_string(K) + " N " + std::to_string(N);
            std::vector<float> rows, ya_alone;
            ASSERT_NO_FATAL_FAILURE(CheckWideGemm(x, R, K, type, N, wa.bytes.data(),
                                                  wb.bytes.data(), bias.data(), pool1, pool2, what,
                                                  &rows, &ya_alone));
            if (first.empty()) {
              first = ya_alone;
              continue;
            }
            ASSERT_EQ(0, std::memcmp(ya_alone.data(), first.data(), first.size() * 4))
                << what << " against " << hwy::TargetName(targets[0]);
          }
        }
      }
    }
  }
}

// The K-quants' prefill GEMM (R > 8: Q4_K, Q5_K, Q6_K) on AVX3_DL runs its own kernels
// (matmul_lanes_k-inl.h KWideGemm: 16-column groups unpacked per task, 8-row register tiles,
// tasks of 128 rows × 32 columns) and its own activation quantizer (QuantizeQ40RowZ); the other
// targets run the 8-column 4-row tile and the scalar quantizer. On every AVX2+ target, around
// those tiles — rows 1..9, 15..17, 63..65, 127..129 and 137, N = 1, 15, 17, 23, 41, 57 (partial
// 16- and 8-column groups), K of 1, 3 and 5 blocks of 256 — every row of the GEMM (bias, strided
// y) is the GEMV of that row bit for bit, the padding of y stays untouched, MatMulPair's two
// outputs are MatMul's, MatMulEpi's epilogue sees each output exactly once, every target gives
// the first one's bits, and the GEMM is within the hard bound of the int8 activation rounding
// against the f64 reference (QuantMatMulReference); with an all-zero and a ~1e30 activation
// group, and an all-zero and a largest-scale weight block (d = dmin = 65504 with every sc_g and
// mn_g 63; Q6_K: d = 65504 with every sub-scale −128).
TEST(CpuMatMulTargets, KQuantWideGemmTileEdgesOnEveryAvx2PlusTarget) {
  std::vector<int64_t> targets;
#if HWY_ARCH_X86
  for (int64_t t : hwy::SupportedAndGeneratedTargets())
    if (t <= HWY_AVX2) targets.push_back(t);  // AVX2, AVX3, AVX3_DL, ...
#endif
  if (targets.empty()) targets.push_back(hwy::SupportedAndGeneratedTargets().front());
  ThreadPool pool1(1), pool2(2);
  const std::vector<int64_t> rows_list = {1,  2,  3,  4,  5,  6,   7,   8,   9,  15,
                                          16, 17, 63, 64, 65, 127, 128, 129, 137};
  // Weight block b of column n: all zero, or the largest scales (quants as they were).
  auto set_block = [](DType type, int64_t K, int64_t n, int64_t b, bool zero,
                      test::TestWeights* wt) {
    const size_t row_bytes = RowBytes(type, K), block_bytes = row_bytes / size_t(K / kQKK);
    uint8_t* blk = wt->bytes.data() + size_t(n) * row_bytes + size_t(b) * block_bytes;
    const uint16_t big = F32ToF16(65504.0f);
    if (zero) {
      std::memset(blk, 0, block_bytes);
    } else if (type == DType::kQ6_K) {
      std::memcpy(blk + offsetof(BlockQ6_K, d), &big, 2);
      std::memset(blk + offsetof(BlockQ6_K, scales), 0x80, 16);  // every sub-scale −128
    } else {
      std::memcpy(blk, &big, 2);       // d
      std::memcpy(blk + 2, &big, 2);   // dmin
      std::memset(blk + 4, 0xFF, 12);  // every 6-bit scale and minimum 63
    }
  };
  for (const DType type : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (const int64_t K : {256, 768, 1280}) {
      for (const int64_t N : {1, 15, 17, 23, 41, 57}) {
        auto wa = test::RandomWeights(type, N, K, uint64_t(K * 11 + N));
        const auto wb = test::RandomWeights(type, N, K, uint64_t(K * 13 + N));
        set_block(type, K, 0, 0, true, &wa);
        set_block(type, K, N - 1, K / kQKK - 1, false, &wa);
        Dequantize(type, wa.bytes.data(), wa.values.data(), N * K);
        const auto bias = test::RandomFloats(size_t(N), uint64_t(N + 9));
        for (const int64_t R : rows_list) {
          auto x = test::RandomFloats(size_t(R * K), uint64_t(K * 3 + N + R));
          std::fill(x.begin(), x.begin() + 32, 0.0f);
          for (size_t k = size_t(R * K) - 32; k < size_t(R * K); ++k) x[k] *= 1e30f;
          std::vector<double> ref, bound;
          test::QuantMatMulReference(x, R, K, wa.values, N, bias.data(),
                                     test::ActivationLevels(type), &ref, &bound);
          std::vector<float> first;
          for (int64_t target : targets) {
            ForcedTarget forced(target);
            const std::string what = std::string(hwy::TargetName(target)) + " " +
                                     std::string(Name(type)) + " R " + std::to_string(R) + " K " +
                                     std::to_string(K) + " N " + std::to_string(N);
            std::vector<float> rows, ya_alone;
            ASSERT_NO_FATAL_FAILURE(CheckWideGemm(x, R, K, type, N, wa.bytes.data(),
                                                  wb.bytes.data(), bias.data(), pool1, pool2, what,
                                                  &rows, &ya_alone));
            for (size_t i = 0; i < ref.size(); ++i) {  // overflowed outputs: the bits alone
              if (std::fabs(ref[i]) > 1e38) continue;
              ASSERT_LE(std::fabs(rows[i] - ref[i]), bound[i]) << what << " output " << i;
            }
            if (first.empty()) {
              first = ya_alone;
              continue;
            }
            ASSERT_EQ(0, std::memcmp(ya_alone.data(), first.data(), first.size() * 4))
                << what << " against " << hwy::TargetName(targets[0]);
          }
        }
      }
    }
  }
}

// The K-quant GEMV (one row: Q4_K and Q5_K through the unrolled row kernel on raw rows, Q6_K
// through its own in-register decoder, Q6KGemvGroup) against the skinny (2..4 rows) and panel (5+)
// GEMM on odd sizes, on every target: each GEMM row equals the GEMV of that row bit for bit, with
// 1 and 3 threads — an odd number of 256-element blocks a row, a single partial group of columns
// (N = 1, 7), a full group and a partial one (9, 41) — and the GEMV is within the hard bound of the
// int8 activation rounding against the double reference.
TEST(CpuMatMulTargets, KQuantGemvMatchesTheGemmOnOddSizes) {
  ThreadPool pool1(1), pool3(3);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    ForcedTarget forced(target);
    for (const int64_t K : {256, 1280, 2304}) {
      for (const int64_t N : {1, 7, 9, 41}) {
        for (DType type : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
          const auto wt = test::RandomWeights(type, N, K, uint64_t(K * 5 + N));
          for (const int64_t R : {2, 3, 5, 7}) {
            const auto x = test::RandomFloats(size_t(R * K), uint64_t(K + 3 * N + R));
            for (ThreadPool* pool : {&pool1, &pool3}) {
              std::vector<float> y(size_t(R * N)), row(static_cast<size_t>(N));
              cpu::MatMul(x.data(), R, K, wt.bytes.data(), type, N, nullptr, y.data(), N, *pool);
              for (int64_t r = 0; r < R; ++r) {
                cpu::MatMul(x.data() + r * K, 1, K, wt.bytes.data(), type, N, nullptr, row.data(),
                            N, *pool);
                ASSERT_EQ(0, std::memcmp(row.data(), y.data() + r * N, size_t(N) * 4))
                    << hwy::TargetName(target) << " " << Name(type) << " R " << R << " K " << K
                    << " N " << N << " row " << r;
                for (int64_t n = 0; n < N; ++n) {
                  // The hard bound of int8 activation rounding (half a step, absmax / 254, per
                  // group of 32) plus f32 rounding.
                  double ref = 0, bound = 0, mag = 0;
                  for (int64_t g = 0; g < K; g += 32) {
                    double amax = 0, wsum = 0;
                    for (int64_t k = g; k < g + 32; ++k) {
                      const double xv = x[size_t(r * K + k)], wv = wt.values[size_t(n * K + k)];
                      ref += xv * wv;
                      mag += std::fabs(xv * wv);
                      amax = std::max(amax, std::fabs(xv));
                      wsum += std::fabs(wv);
                    }
                    bound += amax / 254 * wsum;
                  }
                  EXPECT_LE(std::fabs(row[size_t(n)] - ref), bound * 1.0001 + 1e-5 * mag)
                      << hwy::TargetName(target) << " " << Name(type) << " K " << K << " N " << N;
                }
              }
            }
          }
        }
      }
    }
  }
}

// The largest integer sums the K-quant kernels can meet: every quant at its maximum (Q4_K 15,
// Q5_K 31, Q6_K 63), every 6-bit scale and minimum 63, and activations that quantize to +127 (or
// all −127), on every target; Q6_K also with every quant at 0 (q − 32 = −32) and its signed
// sub-scales at −128. Q5_K's AVX2 lane kernel keeps two int16 partial sums per group (one would
// pass 32767 here and wrap), Q6_K's pairs of maddubs (four would); the result must match the
// dequantized weights to f32 rounding (the activations quantize without loss).
TEST(CpuMatMulTargets, ExtremeKQuantsOnEveryTarget) {
  ThreadPool pool(2);
  const int64_t R = 5, N = 11, K = 3 * kQKK;
  const DType types[] = {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ6_K};
  for (size_t variant = 0; variant < 4; ++variant) {
    const DType type = types[variant];
    const bool low = variant == 3;  // Q6_K: quants 0, sub-scales −128
    const size_t row_bytes = RowBytes(type, K), block_bytes = row_bytes / (K / kQKK);
    std::vector<uint8_t> w(row_bytes * size_t(N), low ? 0x00 : 0xFF);
    for (size_t b = 0; b < w.size() / block_bytes; ++b) {
      uint8_t* blk = w.data() + b * block_bytes;
      const uint16_t d = F32ToF16(0.25f * float(1 + b % 3)), dmin = F32ToF16(0.125f);
      if (type == DType::kQ6_K) {
        std::memcpy(blk + offsetof(BlockQ6_K, d), &d, 2);
        std::memset(blk + offsetof(BlockQ6_K, scales), low ? 0x80 : 127, 16);
      } else {
        std::memcpy(blk, &d, 2);
        std::memcpy(blk + 2, &dmin, 2);
      }
    }
    std::vector<float> wv(size_t(N * K));
    Dequantize(type, w.data(), wv.data(), N * K);
    std::vector<float> x(size_t(R * K));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t k = 0; k < K; ++k) x[size_t(r * K + k)] = (r % 2 ? -0.5f : 2.0f) * float(r + 1);
    for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
      ForcedTarget forced(target);
      std::vector<float> y(size_t(R * N));
      cpu::MatMul(x.data(), R, K, w.data(), type, N, nullptr, y.data(), N, pool);
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t n = 0; n < N; ++n) {
          double ref = 0.0, mag = 0.0;
          for (int64_t k = 0; k < K; ++k) {
            ref += double(x[size_t(r * K + k)]) * wv[size_t(n * K + k)];
            mag += std::fabs(double(x[size_t(r * K + k)]) * wv[size_t(n * K + k)]);
          }
          ASSERT_LE(std::fabs(y[size_t(r * N + n)] - ref), 1e-6 * mag)
              << hwy::TargetName(target) << " " << Name(type) << " r=" << r << " n=" << n << ": "
              << y[size_t(r * N + n)] << " vs " << ref;
        }
      }
    }
  }
}

}  // namespace
}  // namespace es
