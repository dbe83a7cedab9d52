// The CPU backend's KV cache rows of every type (kernels/kv_row.h) against a double-precision
// reference over the row as stored (es::Dequantize of what es::Quantize wrote; f16-rounded for
// f16): the writer writes exactly es::Quantize's bytes, and the dot and axpy that attention makes
// agree with the reference over odd sizes (odd counts of 32-blocks for q8_0 / q4_0, any n for
// f32 / f16) and misaligned rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/kv_row.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/core/tensor.h"
#include "edgeseek/internal/quant/blocks.h"
#include "test_util.h"

namespace es {
namespace {

std::vector<float> Stored(DType t, const std::vector<uint8_t>& row, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  if (IsQuantized(t))
    Dequantize(t, row.data(), v.data(), n);
  else
    ConvertRowToF32(t, row.data(), v.data(), n);
  return v;
}

TEST(CpuKvRow, StoreDotAndAxpyOfEveryTypeOverOddSizes) {
  for (DType t : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
    const std::vector<int64_t> sizes = IsQuantized(t) ? std::vector<int64_t>{32, 96, 160, 512}
                                                      : std::vector<int64_t>{1, 7, 33, 96, 131};
    for (int64_t n : sizes) {
      const std::string tag = std::string(Name(t)) + " n=" + std::to_string(n);
      const auto x = test::RandomFloats(size_t(n), 3 + uint64_t(n), 2.0f);
      const auto q = test::RandomFloats(size_t(n), 7 + uint64_t(n));
      // Rows offset by the type's own alignment (4 bytes for f32; 2 for f16 and for q8_0 / q4_0,
      // whose 34- and 18-byte blocks open with an f16 scale): the rows of a cache are aligned to
      // what their type needs and no more, so never to a SIMD vector. (A 1-byte offset for f32
      // was a misaligned float access, which UBSan reports in cpu::Dot's scalar tail; no cache
      // holds such a row.)
      const size_t off = t == DType::kF32 ? 4 : 2;
      std::vector<uint8_t> buf(RowBytes(t, n) + off), row(RowBytes(t, n));
      uint8_t* at = buf.data() + off;
      cpu::KvStoreRow(x.data(), n, t, at);
      std::memcpy(row.data(), at, row.size());
      if (IsQuantized(t)) {
        std::vector<uint8_t> want(row.size());
        Quantize(t, x.data(), want.data(), n);
        EXPECT_EQ(row, want) << tag;
      }
      const auto s = Stored(t, row, n);
      if (t == DType::kF32) {
        EXPECT_EQ(s, x) << tag;
      }
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        ref += double(q[size_t(i)]) * s[size_t(i)];
        mag += std::fabs(double(q[size_t(i)]) * s[size_t(i)]);
      }
      const float got = cpu::KvDot(q.data(), at, t, n);
      EXPECT_NEAR(got, ref, 1e-5 * mag + 1e-6) << tag;
      std::vector<float> y(q), yr(q);
      cpu::KvAxpy(0.75f, at, t, y.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double want = double(yr[size_t(i)]) + 0.75 * s[size_t(i)];
        EXPECT_NEAR(y[size_t(i)], want, 1e-5 * (std::fabs(want) + 1)) << tag << " i=" << i;
      }
      // A head of a row starts on a block: KvAt skips whole blocks (bytes of the columns before).
      if (IsQuantized(t) && n >= 64) {
        const float tail = cpu::KvDot(q.data() + 32, cpu::KvAt(at, t, 32), t, n - 32);
        double rt = 0, mt = 0;
        for (int64_t i = 32; i < n; ++i) {
          rt += double(q[size_t(i)]) * s[size_t(i)];
          mt += std::fabs(double(q[size_t(i)]) * s[size_t(i)]);
        }
        EXPECT_NEAR(tail, rt, 1e-5 * mt + 1e-6) << tag << " from column 32";
      }
    }
  }
}

// The error of the stored rows is the type's, as a share of its block's largest magnitude: f16
// under 1 / 2048; q8_0 half a step of amax / 127; q4_0 half a step of amax / 8, but a whole step
// at the top (its 16 levels reach -8 d = the signed maximum, and only +7 d the other way).
TEST(CpuKvRow, StoredRowsAreWithinTheTypesStep) {
  const int64_t n = 256;
  const auto x = test::RandomFloats(size_t(n), 11, 3.0f);
  for (const auto& [t, bound] :
       {std::pair{DType::kF16, 1.0 / 2048}, std::pair{DType::kQ8_0, 0.5 / 127},
        std::pair{DType::kQ4_0, 1.0 / 8}}) {
    std::vector<uint8_t> row(RowBytes(t, n));
    cpu::KvStoreRow(x.data(), n, t, row.data());
    const auto s = Stored(t, row, n);
    for (int64_t b = 0; b < n / 32; ++b) {
      double amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(double(x[size_t(b * 32 + j)])));
      for (int j = 0; j < 32; ++j) {
        const size_t i = size_t(b * 32 + j);
        EXPECT_LE(std::fabs(double(s[i]) - x[i]), bound * amax * 1.01 + 1e-7)
            << Name(t) << " i=" << i;
      }
    }
  }
}

}  // namespace
}  // namespace es
