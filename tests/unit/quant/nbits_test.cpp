// MatMulNBits / GatherBlockQuantized weights onto edgeseek block types: every case checks that
// the tensor's values (dequantized) equal onnxruntime's (q - z) * s bit for bit, and which type
// was chosen: Q4_0 / Q4_1 / Q8_0 where exact, F32 otherwise with a reason.
#include "edgeseek/internal/quant/nbits.h"

#include <gtest/gtest.h>

#include <random>

#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/quant/blocks.h"

namespace es {
namespace {

struct Case {
  int bits = 4, block = 32;
  int64_t n = 3, k = 128;
  bool zp = false, f16_exact = true, g_idx = false;
  float zp_float = -1;  // >= 0: float zero points of this value instead of packed ones
  DType want = DType::kQ4_0;
};

void Check(const Case& c) {
  std::mt19937 rng(uint32_t(c.bits * 1000 + c.block + c.zp * 7 + c.f16_exact * 3 + c.g_idx));
  NBitsWeight w;
  w.name = "w";
  w.n = c.n;
  w.k = c.k;
  w.bits = c.bits;
  w.block = c.block;
  const int64_t nb = w.blocks(), blob = c.block * c.bits / 8;
  std::vector<uint8_t> q(size_t(c.n * nb * blob));
  for (auto& b : q) b = uint8_t(rng());
  std::vector<float> s(size_t(c.n * nb));
  for (auto& x : s) {
    const float v = float(int(rng() % 63) + 1) / 1024.0f;  // 6 bits: s and s*z exact in f16
    x = c.f16_exact ? v : v * 1.0001f;
  }
  std::vector<uint8_t> zp(size_t(c.n * ((nb * c.bits + 7) / 8)));
  for (auto& b : zp) b = uint8_t(rng());
  std::vector<int32_t> gi(size_t(c.k));
  for (int64_t i = 0; i < c.k; ++i)
    gi[size_t(i)] = int32_t((c.k - 1 - i) / c.block);  // reversed blocks
  w.q = q.data();
  w.scales = s.data();
  if (c.zp) w.zp_packed = zp.data();
  std::vector<float> zf(size_t(c.n * nb), c.zp_float);
  if (c.zp_float >= 0) w.zp_float = zf.data();
  if (c.g_idx) w.g_idx = gi.data();
  std::string why;
  const Tensor t = NBitsToTensor(w, &why);
  EXPECT_EQ(t.dtype, c.want) << why;
  EXPECT_EQ(why.empty(), c.want != DType::kF32);
  std::vector<float> row(size_t(c.k));
  for (int64_t n = 0; n < c.n; ++n) {
    const uint8_t* src = t.bytes() + size_t(n) * t.row_bytes();
    if (IsQuantized(t.dtype))
      Dequantize(t.dtype, src, row.data(), c.k);
    else
      ConvertRowToF32(t.dtype, src, row.data(), c.k);
    for (int64_t k = 0; k < c.k; ++k)
      ASSERT_EQ(row[size_t(k)], NBitsValue(w, n, k)) << n << "," << k;
  }
}

TEST(NBits, FourBitSymmetricIsQ4_0) { Check({}); }
TEST(NBits, LargerBlocksRepeatTheScale) { Check({.block = 128, .k = 256}); }
TEST(NBits, EightBitIsQ8_0) { Check({.bits = 8, .block = 64, .want = DType::kQ8_0}); }
TEST(NBits, ZeroPointsAreQ4_1WhereExact) { Check({.zp = true, .want = DType::kQ4_1}); }
TEST(NBits, Block16IsDequantized) { Check({.block = 16, .want = DType::kF32}); }
// onnxruntime's quantizer on f32 models: f32 scales, with or without zero points, any block.
TEST(NBits, F32ScalesAreI4F) { Check({.f16_exact = false, .want = DType::kI4F}); }
TEST(NBits, F32ScalesWithZeroPointsAreI4F) {
  Check({.zp = true, .f16_exact = false, .want = DType::kI4F});
}
TEST(NBits, F32ScalesInLargerBlocksAreI4F) {
  Check({.block = 256, .n = 5, .k = 512, .zp = true, .f16_exact = false, .want = DType::kI4F});
}
TEST(NBits, IntegerFloatZeroPointsAreI4F) {
  Check({.f16_exact = false, .zp_float = 11.0f, .want = DType::kI4F});
}
TEST(NBits, FractionalZeroPointsAreDequantized) {
  Check({.f16_exact = false, .zp_float = 7.5f, .want = DType::kF32});
}
TEST(NBits, EightBitF32ScalesAreDequantized) {
  Check({.bits = 8, .block = 64, .f16_exact = false, .want = DType::kF32});
}
TEST(NBits, ReorderedGroupsAreDequantized) { Check({.g_idx = true, .want = DType::kF32}); }
TEST(NBits, EightBitZeroPointsAreDequantized) {
  Check({.bits = 8, .zp = true, .want = DType::kF32});
}

}  // namespace
}  // namespace es
