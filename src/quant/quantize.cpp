// Dispatch of Quantize/Dequantize over element types (dense conversions and the block formats).
#include <cmath>
#include <cstring>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/core/tensor.h"
#include "edgeseek/internal/quant/blocks.h"
#include "quant_util.h"

namespace es {

bool CanQuantize(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ8_K:
    case DType::kI4G:
    case DType::kI4F:
      return true;
    default:
      return false;
  }
}

void Dequantize(DType t, const void* src, float* dst, int64_t n) {
  const int be = BlockElems(t);
  ES_CHECK(n >= 0 && n % be == 0, "cannot dequantize ", n, " elements of ", Name(t),
           ": not a multiple of its block size ", be);
  const int64_t nb = n / be;
  switch (t) {
    case DType::kQ8_0:
      return quant::DequantizeQ8_0(src, dst, nb);
    case DType::kQ4_0:
      return quant::DequantizeQ4_0(src, dst, nb);
    case DType::kQ4_1:
      return quant::DequantizeQ4_1(src, dst, nb);
    case DType::kQ5_0:
      return quant::DequantizeQ5_0(src, dst, nb);
    case DType::kQ5_1:
      return quant::DequantizeQ5_1(src, dst, nb);
    case DType::kQ4_K:
      return quant::DequantizeQ4K(src, dst, nb);
    case DType::kQ5_K:
      return quant::DequantizeQ5K(src, dst, nb);
    case DType::kQ6_K:
      return quant::DequantizeQ6K(src, dst, nb);
    case DType::kQ8_K:
      return quant::DequantizeQ8K(src, dst, nb);
    case DType::kI4G:
      return quant::DequantizeI4G(src, dst, nb);
    case DType::kI4F:
      return quant::DequantizeI4F(src, dst, nb);
    case DType::kI8: {
      auto* s = static_cast<const int8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = float(s[i]);
      return;
    }
    default:
      return ConvertRowToF32(t, src, dst, n);
  }
}

void Quantize(DType t, const float* src, void* dst, int64_t n) {
  ES_CHECK(CanQuantize(t), "cannot quantize to ", Name(t));
  const int be = BlockElems(t);
  ES_CHECK(n >= 0 && n % be == 0, "cannot quantize ", n, " elements to ", Name(t),
           ": not a multiple of its block size ", be);
  // Non-finite inputs have no meaningful block scale (and would make the integer conversions
  // undefined); a weight file containing them is broken.
  if (IsQuantized(t))
    for (int64_t i = 0; i < n; ++i)
      ES_CHECK(std::isfinite(src[i]), "cannot quantize to ", Name(t), ": element ", i,
               " is not finite (", src[i], ")");
  const int64_t nb = n / be;
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToF16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToBF16(src[i]);
      return;
    }
    case DType::kQ8_0:
      return quant::QuantizeQ8_0(src, dst, nb);
    case DType::kQ4_0:
      return quant::QuantizeQ4_0(src, dst, nb);
    case DType::kQ4_1:
      return quant::QuantizeQ4_1(src, dst, nb);
    case DType::kQ5_0:
      return quant::QuantizeQ5_0(src, dst, nb);
    case DType::kQ5_1:
      return quant::QuantizeQ5_1(src, dst, nb);
    case DType::kQ4_K:
      return quant::QuantizeQ4K(src, dst, nb);
    case DType::kQ5_K:
      return quant::QuantizeQ5K(src, dst, nb);
    case DType::kQ6_K:
      return quant::QuantizeQ6K(src, dst, nb);
    case DType::kQ8_K:
      return quant::QuantizeQ8K(src, dst, nb);
    case DType::kI4G:
      return quant::QuantizeI4G(src, dst, nb);
    case DType::kI4F:
      return quant::QuantizeI4F(src, dst, nb);
    default:
      Fail("cannot quantize to ", Name(t));
  }
}

}  // namespace es
