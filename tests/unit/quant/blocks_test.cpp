// Block formats: dequantization of hand-built blocks against the GGUF formulas (computed here
// element by element, independently of the library's loops), round-trip error bounds per type,
// formula-level checks of the encoders, odd sizes, multi-row layouts and determinism.
#include "edgeseek/internal/quant/blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"
#include "test_util.h"

namespace es {
namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}
void PutF16(uint8_t* p, float v) {
  const uint16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}
std::vector<float> Deq(DType t, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  Dequantize(t, bytes.data(), out.data(), n);
  return out;
}

// ---- Hand-built blocks. Layout offsets are written out as the GGUF spec gives them.

TEST(BlocksDequant, Q8_0) {
  std::vector<uint8_t> b = RandomBytes(34 * 2, 1);
  PutF16(&b[0], 0.5f);
  PutF16(&b[34], -0.03125f);
  const auto y = Deq(DType::kQ8_0, b, 64);
  for (int blk = 0; blk < 2; ++blk) {
    const float d = blk == 0 ? 0.5f : -0.03125f;
    for (int j = 0; j < 32; ++j)
      EXPECT_EQ(y[32 * blk + j], d * float(int8_t(b[34 * blk + 2 + j]))) << j;
  }
}

TEST(BlocksDequant, Q4_0) {
  std::vector<uint8_t> b = RandomBytes(18, 2);
  PutF16(&b[0], 0.25f);
  const auto y = Deq(DType::kQ4_0, b, 32);
  for (int e = 0; e < 32; ++e) {
    const uint8_t byte = b[2 + e % 16];
    const int q = e < 16 ? (byte & 15) : (byte >> 4);
    EXPECT_EQ(y[e], 0.25f * float(q - 8)) << e;
  }
}

TEST(BlocksDequant, Q4_1) {
  std::vector<uint8_t> b = RandomBytes(20, 3);
  PutF16(&b[0], 0.125f);
  PutF16(&b[2], -1.5f);
  const auto y = Deq(DType::kQ4_1, b, 32);
  for (int e = 0; e < 32; ++e) {
    const uint8_t byte = b[4 + e % 16];
    const int q = e < 16 ? (byte & 15) : (byte >> 4);
    EXPECT_EQ(y[e], 0.125f * float(q) - 1.5f) << e;
  }
}

TEST(BlocksDequant, Q5_0) {
  std::vector<uint8_t> b = RandomBytes(22, 4);
  PutF16(&b[0], 0.0625f);
  const uint32_t qh =
      uint32_t(b[2]) | uint32_t(b[3]) << 8 | uint32_t(b[4]) << 16 | uint32_t(b[5]) << 24;
  const auto y = Deq(DType::kQ5_0, b, 32);
  for (int e = 0; e < 32; ++e) {
    const uint8_t byte = b[6 + e % 16];
    const int lo = e < 16 ? (byte & 15) : (byte >> 4);
    const int q = lo + 16 * int((qh >> e) & 1);
    EXPECT_EQ(y[e], 0.0625f * float(q - 16)) << e;
  }
}

TEST(BlocksDequant, Q5_1) {
  std::vector<uint8_t> b = RandomBytes(24, 5);
  PutF16(&b[0], 0.5f);
  PutF16(&b[2], 3.0f);
  const uint32_t qh =
      uint32_t(b[4]) | uint32_t(b[5]) << 8 | uint32_t(b[6]) << 16 | uint32_t(b[7]) << 24;
  const auto y = Deq(DType::kQ5_1, b, 32);
  for (int e = 0; e < 32; ++e) {
    const uint8_t byte = b[8 + e % 16];
    const int lo = e < 16 ? (byte & 15) : (byte >> 4);
    const int q = lo + 16 * int((qh >> e) & 1);
    EXPECT_EQ(y[e], 0.5f * float(q) + 3.0f) << e;
  }
}

// Packs 8 six-bit scales and mins the way the spec describes K-quant "scales[12]": bytes 0..3
// hold sc[0..3] with the top 2 bits of sc[4..7] in bits 6-7; bytes 4..7 hold mn[0..3] with the
// top 2 bits of mn[4..7]; bytes 8..11 hold the low 4 bits of sc[4..7] | low 4 bits of mn[4..7]
// << 4.
void PackK4(const int* sc, const int* mn, uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = uint8_t(mn[j] | ((mn[j + 4] >> 4) << 6));
    out[j + 8] = uint8_t((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

TEST(BlocksDequant, ScaleMinK4RoundTrip) {
  std::mt19937 rng(6);
  for (int trial = 0; trial < 100; ++trial) {
    int sc[8], mn[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = int(rng() % 64);
      mn[j] = int(rng() % 64);
    }
    uint8_t packed[12];
    PackK4(sc, mn, packed);
    for (int j = 0; j < 8; ++j) {
      uint8_t s, m;
      UnpackScaleMinK4(j, packed, &s, &m);
      EXPECT_EQ(s, sc[j]);
      EXPECT_EQ(m, mn[j]);
    }
  }
}

TEST(BlocksDequant, Q4_K) {
  std::vector<uint8_t> b = RandomBytes(144, 7);
  PutF16(&b[0], 0.01f);
  PutF16(&b[2], 0.02f);
  const float d = F16ToF32(F32ToF16(0.01f)), dmin = F16ToF32(F32ToF16(0.02f));
  const int sc[8] = {1, 63, 17, 32, 5, 48, 0, 33}, mn[8] = {2, 0, 63, 16, 40, 7, 31, 59};
  PackK4(sc, mn, &b[4]);
  const auto y = Deq(DType::kQ4_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32, c = e / 64, l = e % 32;
    const uint8_t byte = b[16 + 32 * c + l];
    const int q = (s % 2 == 0) ? (byte & 15) : (byte >> 4);
    EXPECT_FLOAT_EQ(y[e], d * float(sc[s]) * float(q) - dmin * float(mn[s])) << e;
  }
}

TEST(BlocksDequant, Q5_K) {
  std::vector<uint8_t> b = RandomBytes(176, 8);
  PutF16(&b[0], 0.003f);
  PutF16(&b[2], 0.05f);
  const float d = F16ToF32(F32ToF16(0.003f)), dmin = F16ToF32(F32ToF16(0.05f));
  const int sc[8] = {63, 1, 2, 60, 31, 32, 15, 16}, mn[8] = {0, 1, 62, 63, 20, 21, 45, 3};
  PackK4(sc, mn, &b[4]);
  const auto y = Deq(DType::kQ5_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32, c = e / 64, l = e % 32;
    const uint8_t byte = b[48 + 32 * c + l];
    const int lo = (s % 2 == 0) ? (byte & 15) : (byte >> 4);
    const int hi = (b[16 + l] >> s) & 1;  // qh[l], bit = sub-block index
    EXPECT_FLOAT_EQ(y[e], d * float(sc[s]) * float(lo + 16 * hi) - dmin * float(mn[s])) << e;
  }
}

TEST(BlocksDequant, Q6_K) {
  std::vector<uint8_t> b = RandomBytes(210, 9);
  PutF16(&b[208], 0.002f);
  const float d = F16ToF32(F32ToF16(0.002f));
  const auto y = Deq(DType::kQ6_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t lbyte = b[64 * h + l + 32 * (k & 1)];  // ql
    const int lo = k < 2 ? (lbyte & 15) : (lbyte >> 4);
    const int hi = (b[128 + 32 * h + l] >> (2 * k)) & 3;  // qh
    const int8_t scale = int8_t(b[192 + e / 16]);         // scales: one per 16 elements
    EXPECT_FLOAT_EQ(y[e], d * float(scale) * float((lo | (hi << 4)) - 32)) << e;
  }
}

TEST(BlocksDequant, Q8_K) {
  std::vector<uint8_t> b = RandomBytes(292, 10);
  const float d = 0.0123f;
  std::memcpy(&b[0], &d, 4);
  const auto y = Deq(DType::kQ8_K, b, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], d * float(int8_t(b[4 + e])));
}

TEST(BlocksDequant, I4G) {
  std::vector<uint8_t> b = RandomBytes(66, 11);
  PutF16(&b[0], 0.75f);
  const auto y = Deq(DType::kI4G, b, 128);
  for (int e = 0; e < 128; ++e) {
    const uint8_t byte = b[2 + e / 2];
    const int q = (e % 2 == 0) ? (byte & 15) : (byte >> 4);
    EXPECT_EQ(y[e], 0.75f * float(q - 8)) << e;
  }
}

TEST(BlocksDequant, I4F) {
  // Two blocks: f32 scales that f16 cannot hold, zero points 3 and 15 (levels -15..12).
  std::vector<uint8_t> b = RandomBytes(48, 12);
  const float d[2] = {0.1f, -3.3e-7f};
  const uint8_t z[2] = {3, 15};
  for (int i = 0; i < 2; ++i) {
    std::memcpy(&b[24 * i], &d[i], 4);
    b[24 * i + 20] = z[i];
  }
  const auto y = Deq(DType::kI4F, b, 64);
  for (int e = 0; e < 64; ++e) {
    const int i = e / 32, j = e % 32;
    const uint8_t byte = b[24 * i + 4 + j % 16];
    const int q = j < 16 ? (byte & 15) : (byte >> 4);
    EXPECT_EQ(y[e], float(q - int(z[i])) * d[i]) << e;
  }
}

TEST(BlocksQuant, I4FKeepsZeroAndTheEnds) {
  // lo = min(0, x) and hi = max(0, x) are the levels 0 and 15 (up to the rounding of d), zero is
  // a level, and the pad bytes are zero.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[size_t(j)] = -0.5f + float(j) * (2.0f / 31.0f);
  BlockI4F blk;
  std::memset(&blk, 0xAB, sizeof(blk));
  Quantize(DType::kI4F, x.data(), &blk, 32);
  EXPECT_EQ(blk.d, 2.0f / 15.0f);
  EXPECT_EQ(blk.z, 4);  // round(0.5 / d) = round(3.75)
  EXPECT_EQ(blk.pad[0] | blk.pad[1] | blk.pad[2], 0);
  std::vector<float> y(32);
  Dequantize(DType::kI4F, &blk, y.data(), 32);
  EXPECT_NEAR(y[0], -0.5f, blk.d / 2);
  EXPECT_NEAR(y[31], 1.5f, blk.d / 2);
  for (int j = 0; j < 32; ++j)
    EXPECT_LE(std::fabs(y[size_t(j)] - x[size_t(j)]), blk.d / 2 * 1.0001f);
}

// ---- Encoders: the formulas of the reference quantizers on a block we can work by hand.

TEST(BlocksQuant, Q4_0FollowsReferenceFormula) {
  // The value of largest magnitude (-4) sets d = -4 / -8 = 0.5 and maps to level 0.
  std::vector<float> x(32, 0.0f);
  x[0] = -4.0f;
  x[1] = 2.0f;   // 2 / 0.5 + 8.5 = 12.5 -> 12 -> (12 - 8) * 0.5 = 2
  x[17] = 3.9f;  // 7.8 + 8.5 = 16.3 -> 16 -> clamped to 15 -> 3.5
  x[5] = 0.2f;   // 0.4 + 8.5 = 8.9 -> 8 -> 0 (truncation, as the reference does)
  BlockQ4_0 blk;
  Quantize(DType::kQ4_0, x.data(), &blk, 32);
  EXPECT_EQ(F16ToF32(blk.d), 0.5f);
  std::vector<float> y(32);
  Dequantize(DType::kQ4_0, &blk, y.data(), 32);
  EXPECT_EQ(y[0], -4.0f);
  EXPECT_EQ(y[1], 2.0f);
  EXPECT_EQ(y[17], 3.5f);
  EXPECT_EQ(y[5], 0.0f);
  EXPECT_EQ(blk.qs[0] & 15, 0);
}

TEST(BlocksQuant, Q8_0RoundsHalfAwayFromZero) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // d = 1
  x[1] = 2.5f;    // roundf -> 3
  x[2] = -2.5f;   // -> -3
  BlockQ8_0 blk;
  Quantize(DType::kQ8_0, x.data(), &blk, 32);
  EXPECT_EQ(F16ToF32(blk.d), 1.0f);
  EXPECT_EQ(blk.qs[0], 127);
  EXPECT_EQ(blk.qs[1], 3);
  EXPECT_EQ(blk.qs[2], -3);
}

TEST(BlocksQuant, Q8_KBlockSums) {
  const auto x = test::RandomFloats(512, 12);
  std::vector<BlockQ8_K> b(2);
  Quantize(DType::kQ8_K, x.data(), b.data(), 512);
  for (const auto& blk : b)
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += blk.qs[16 * g + l];
      EXPECT_EQ(blk.bsums[g], s);
    }
}

TEST(BlocksQuant, I4GNibbleOrderIsLowFirst) {
  // Alternating +v / -v: element 0 (even) in the low nibble, element 1 in the high nibble.
  std::vector<float> x(128);
  for (int j = 0; j < 128; ++j) x[j] = (j % 2 == 0) ? 7.0f : -7.0f;
  BlockI4G blk;
  Quantize(DType::kI4G, x.data(), &blk, 128);
  const float d = F16ToF32(blk.d);
  ASSERT_NEAR(std::fabs(d), 1.0f, 0.15f);
  std::vector<float> y(128);
  Dequantize(DType::kI4G, &blk, y.data(), 128);
  for (int j = 0; j < 128; ++j) EXPECT_NEAR(y[j], x[j], 0.6f) << j;
  const int lo = blk.qs[0] & 15, hi = blk.qs[0] >> 4;
  EXPECT_EQ(float(lo - 8) * d, y[0]);
  EXPECT_EQ(float(hi - 8) * d, y[1]);
}

// ---- Round trips. Tolerance: ||deq(q(x)) - x|| / ||x|| on 8 rows of 768 uniform [-1, 1)
// values, and on Gaussian values with an 8-sigma outlier every 397 elements. Bounds sit ~25%
// above what the encoders measure, so a regression in a scale search fails them.
struct RoundTripCase {
  DType type;
  double tol_uniform;
  double tol_gauss;
};

std::vector<float> GaussWithOutliers(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (i % 397 == 11) ? 0.16f * (i % 2 ? 1.0f : -1.0f) : g(rng);
  return v;
}

double RoundTripError(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(RowBytes(t, int64_t(x.size())));
  Quantize(t, x.data(), q.data(), int64_t(x.size()));
  std::vector<float> y(x.size());
  Dequantize(t, q.data(), y.data(), int64_t(x.size()));
  return test::RelL2(y, x);
}

class RoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(RoundTrip, ErrorWithinBound) {
  const RoundTripCase c = GetParam();
  const size_t n = 8 * 768;
  const double eu = RoundTripError(c.type, test::RandomFloats(n, 100));
  const double eg = RoundTripError(c.type, GaussWithOutliers(n, 101));
  EXPECT_LT(eu, c.tol_uniform) << Name(c.type);
  EXPECT_LT(eg, c.tol_gauss) << Name(c.type);
  EXPECT_GT(eu, 0.0) << "suspiciously exact";
  RecordProperty("rel_rmse_uniform", std::to_string(eu));
  RecordProperty("rel_rmse_gauss", std::to_string(eg));
  std::printf("%-6s rel RMSE uniform %.5f gauss+outliers %.5f\n", std::string(Name(c.type)).c_str(),
              eu, eg);
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, RoundTrip,
    // measured (uniform / gauss+outliers): f16 .00018/.00021, bf16 .0015/.0016, q8_0 .0037/.0068,
    // q4_0 .065/.108, q4_1 .060/.086, q5_0 .031/.054, q5_1 .029/.042, q4_k .054/.080,
    // q5_k .027/.041, q6_k .013/.021, q8_k .0039/.014, i4g .064/.158 (128-wide groups catch
    // more of the outliers than 32-wide ones).
    ::testing::Values(
        RoundTripCase{DType::kF16, 2.3e-4, 2.7e-4}, RoundTripCase{DType::kBF16, 1.9e-3, 2.0e-3},
        RoundTripCase{DType::kQ8_0, 0.0047, 0.0085}, RoundTripCase{DType::kQ4_0, 0.081, 0.135},
        RoundTripCase{DType::kQ4_1, 0.075, 0.108}, RoundTripCase{DType::kQ5_0, 0.039, 0.067},
        RoundTripCase{DType::kQ5_1, 0.037, 0.053}, RoundTripCase{DType::kQ4_K, 0.068, 0.100},
        RoundTripCase{DType::kQ5_K, 0.034, 0.051}, RoundTripCase{DType::kQ6_K, 0.0165, 0.0264},
        RoundTripCase{DType::kQ8_K, 0.0049, 0.0175}, RoundTripCase{DType::kI4G, 0.080, 0.198},
        RoundTripCase{DType::kI4F, 0.075, 0.108}),
    [](const auto& info) { return std::string(Name(info.param.type)); });

TEST(BlocksQuant, KQuantSearchBeatsPlainMinMax) {
  // Q4_K's weighted (scale, min) search must do better than Q4_1's plain min/max formula on
  // Gaussian data (both 4-bit with an offset); Q6_K better than Q5_1.
  const auto x = GaussWithOutliers(16 * 256, 102);
  EXPECT_LT(RoundTripError(DType::kQ4_K, x), RoundTripError(DType::kQ4_1, x));
  EXPECT_LT(RoundTripError(DType::kQ6_K, x), RoundTripError(DType::kQ5_1, x));
}

// ---- Special inputs.
class SpecialInputs : public ::testing::TestWithParam<DType> {};

TEST_P(SpecialInputs, ZerosConstantsAndOutliers) {
  const DType t = GetParam();
  const int64_t n = 768;
  std::vector<uint8_t> q(RowBytes(t, n));
  std::vector<float> y(static_cast<size_t>(n));
  std::vector<float> zeros(size_t(n), 0.0f);
  Quantize(t, zeros.data(), q.data(), n);
  Dequantize(t, q.data(), y.data(), n);
  for (float v : y) ASSERT_EQ(v, 0.0f) << Name(t);
  std::vector<float> consts(size_t(n), -0.75f);
  Quantize(t, consts.data(), q.data(), n);
  Dequantize(t, q.data(), y.data(), n);
  for (float v : y) ASSERT_NEAR(v, -0.75f, 0.75f * 0.02f) << Name(t);
  // One huge outlier per block must come back within its block's step.
  std::vector<float> out = test::RandomFloats(size_t(n), 13, 0.01f);
  for (int64_t i = 0; i < n; i += BlockElems(t)) out[size_t(i + 3)] = 100.0f;
  Quantize(t, out.data(), q.data(), n);
  Dequantize(t, q.data(), y.data(), n);
  for (int64_t i = 0; i < n; i += BlockElems(t))
    EXPECT_NEAR(y[size_t(i + 3)], 100.0f, 100.0f * 0.08f) << Name(t);
}

TEST_P(SpecialInputs, RowsAreIndependentAndDeterministic) {
  const DType t = GetParam();
  const int64_t cols = 3 * 256, rows = 5;  // a multiple of every block size (32, 128, 256)
  const auto x = test::RandomFloats(size_t(cols * rows), 14);
  const size_t rb = RowBytes(t, cols);
  std::vector<uint8_t> whole(rb * rows), again(rb * rows), by_row(rb * rows);
  Quantize(t, x.data(), whole.data(), cols * rows);
  Quantize(t, x.data(), again.data(), cols * rows);
  for (int64_t r = 0; r < rows; ++r) Quantize(t, x.data() + r * cols, by_row.data() + r * rb, cols);
  EXPECT_EQ(whole, again) << "not deterministic";
  EXPECT_EQ(whole, by_row) << "blocks depend on their neighbours";
}

TEST_P(SpecialInputs, SizesNotAMultipleOfTheBlockAreErrors) {
  const DType t = GetParam();
  const int64_t n = BlockElems(t) + 1;
  std::vector<float> x(size_t(n), 1.0f);
  std::vector<uint8_t> q(RowBytes(t, 2 * BlockElems(t)));
  EXPECT_THROW(Quantize(t, x.data(), q.data(), n), Error);
  EXPECT_THROW(Dequantize(t, q.data(), x.data(), n), Error);
}

TEST_P(SpecialInputs, NonFiniteInputIsAnError) {
  const DType t = GetParam();
  std::vector<float> x(size_t(BlockElems(t)), 1.0f);
  x[1] = NAN;
  std::vector<uint8_t> q(RowBytes(t, BlockElems(t)));
  try {
    Quantize(t, x.data(), q.data(), BlockElems(t));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("element 1"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(BlockTypes, SpecialInputs,
                         ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                                           DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                                           DType::kQ8_K, DType::kI4G, DType::kI4F),
                         [](const auto& info) { return std::string(Name(info.param)); });

TEST(BlocksQuant, BlockSizesAgreeWithDTypeTable) {
  EXPECT_EQ(RowBytes(DType::kQ8_0, 32), sizeof(BlockQ8_0));
  EXPECT_EQ(RowBytes(DType::kQ4_0, 32), sizeof(BlockQ4_0));
  EXPECT_EQ(RowBytes(DType::kQ4_1, 32), sizeof(BlockQ4_1));
  EXPECT_EQ(RowBytes(DType::kQ5_0, 32), sizeof(BlockQ5_0));
  EXPECT_EQ(RowBytes(DType::kQ5_1, 32), sizeof(BlockQ5_1));
  EXPECT_EQ(RowBytes(DType::kQ4_K, 256), sizeof(BlockQ4_K));
  EXPECT_EQ(RowBytes(DType::kQ5_K, 256), sizeof(BlockQ5_K));
  EXPECT_EQ(RowBytes(DType::kQ6_K, 256), sizeof(BlockQ6_K));
  EXPECT_EQ(RowBytes(DType::kQ8_K, 256), sizeof(BlockQ8_K));
  EXPECT_EQ(RowBytes(DType::kI4G, 128), sizeof(BlockI4G));
  EXPECT_EQ(RowBytes(DType::kI4F, 32), sizeof(BlockI4F));
}

}  // namespace
}  // namespace es
